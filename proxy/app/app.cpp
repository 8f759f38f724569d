#include "app/app.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "http/server.hpp"
#include "routing/registry.hpp"
#include "service/monitor.hpp"
#include "service/pipeline.hpp"

namespace warmslot::app {
namespace {

void setup_logging(const config::config& cfg) {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    for (const char* name : {"warmslot", "http", "access", "routing", "cache"}) {
        if (spdlog::get(name)) continue;
        spdlog::register_logger(std::make_shared<spdlog::logger>(name, sink));
    }
    spdlog::set_default_logger(spdlog::get("warmslot"));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
    spdlog::set_level(spdlog::level::from_str(cfg.log.level));
}

routing::planner_settings planner_settings(const config::routing_settings& r) {
    routing::planner_settings s;
    s.short_request_tokens = r.short_request_tokens;
    s.long_segment_tokens = r.long_segment_tokens;
    s.scratch_slot = r.scratch_slot;
    s.scratch_min_slots = r.scratch_min_slots;
    s.max_wait_seconds = std::chrono::duration<double>(r.max_wait).count();
    return s;
}

std::size_t worker_count() {
    const unsigned hw = std::thread::hardware_concurrency();
    return std::clamp<std::size_t>(hw == 0 ? 1 : hw, 1, 4);
}

}  // namespace

int run(const config::config& cfg) {
    setup_logging(cfg);
    http_server::workers workers(worker_count());
    std::vector<std::string> names;
    for (const auto& b : cfg.backends) names.push_back(b.name);
    routing::registry registry(names, planner_settings(cfg.routing));
    service::monitor monitor(cfg, registry, workers.context(0).get_executor());
    net::thread_pool index_thread(1);  // SQLite work never runs on an I/O worker
    service::disk_tier disk(cfg, registry, index_thread.get_executor());
    service::pipeline pipeline(cfg, workers, registry, &disk);
    http_server::server server(cfg, workers,
                               [&pipeline](http_server::exchange& ex) { return pipeline.handle(ex); });
    server.listen();

    net::signal_set signals(workers.context(0), SIGINT, SIGTERM);
    signals.async_wait([&](const error_code& ec, int sig) {
        if (ec) return;
        spdlog::info("signal {}: stopping (grace {} ms)", sig, cfg.timeouts.shutdown_grace.count());
        monitor.stop();
        server.stop(cfg.timeouts.shutdown_grace);
    });

    // A stable line on stdout so scripts and tests learn the port (listen port 0 picks one).
    std::printf("warmslot listening on http://%s:%u\n", cfg.listen.host.c_str(), server.port());
    std::fflush(stdout);
    spdlog::info("listening on {}:{} with {} workers, {} backends", cfg.listen.host, server.port(),
                 workers.size(), cfg.backends.size());
    monitor.start();
    workers.start();
    workers.join();
    index_thread.join();
    spdlog::info("stopped");
    return 0;
}

}  // namespace warmslot::app
