#include "app/app.hpp"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#ifndef _WIN32
#include <sys/resource.h>
#endif
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "app/file_watch.hpp"
#include "app/sd_notify.hpp"
#include "app/signals.hpp"
#include "app/supervisor.hpp"
#include "config/reload.hpp"
#include "config/source.hpp"
#include "http/server.hpp"
#include "monitor/monitor.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"

namespace warmslot::app {
namespace {

void setup_logging(const config::config& cfg, const run_options& options) {
    std::vector<spdlog::sink_ptr> sinks;
    if (options.console) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    if (!options.log_file.empty()) {
        sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
            options.log_file, std::size_t{10} << 20, 5));
    }
    for (const char* name : {"warmslot", "http", "access", "routing", "cache", "rewrite"}) {
        if (spdlog::get(name)) continue;
        spdlog::register_logger(std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end()));
    }
    spdlog::set_default_logger(spdlog::get("warmslot"));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
    spdlog::set_level(spdlog::level::from_str(cfg.log.level));
    // A service's log file is its only console: write each line through.
    if (!options.log_file.empty()) spdlog::flush_on(spdlog::level::trace);
}

std::size_t worker_count() {
    const unsigned hw = std::thread::hardware_concurrency();
    return std::clamp<std::size_t>(hw == 0 ? 1 : hw, 1, 4);
}

// A one-thread pool whose pending work can be destroyed before its owner's other members.
class one_thread : public net::thread_pool {
  public:
    one_thread() : net::thread_pool(1) {}
    using net::execution_context::shutdown;  // protected in execution_context
};

bool supervises(const config::config& cfg) {
    return std::any_of(cfg.backends.begin(), cfg.backends.end(),
                       [](const config::backend& b) { return b.supervised(); });
}

// Everything one running warmslot owns, in construction order.
class runtime {
  public:
    runtime(std::string path, config::config cfg, std::string socket_dir)
        : path_(std::move(path)),
          sockets_{std::move(socket_dir)},
          src_(std::move(cfg)),
          workers_(worker_count()),
          registry_(backend_names(*src_.current()), planner_settings(src_.current()->routing)),
          monitor_(src_, registry_, workers_.context(0).get_executor()),
          disk_(src_, registry_, index_thread_.get_executor(), file_thread_.get_executor()),
          pipeline_(src_, workers_, registry_, &disk_),
          server_(
              src_, workers_, [this](http_server::exchange& ex) { return pipeline_.handle(ex); },
              [this](const http::request_header<>& head) { return pipeline_.admits(head); }),
          signals_(workers_.context(0)),
          save_pool_(control_.get_executor()),
          supervisor_(src_, registry_, control_.get_executor(),
                      [this](int backend, std::optional<std::string> charge_to) {
                          return save_slots(backend, std::move(charge_to));
                      }) {
        pipeline_.set_starter(&supervisor_);
        disk_.on_restore([this](int backend, double s) { supervisor_.restored(backend, s); });
        pipeline_.set_refusals(&server_.refusals());
    }

    int run(const run_options& options);
    void request_stop();  // any thread

  private:
    void on_signal(int sig);
    void reload(const char* why);  // on control_ only: reloads are serialized
    void stop();
    void watch_file();
    awaitable<void> save_slots(int backend, std::optional<std::string> charge_to);  // on control_
    awaitable<void> shutdown_backends();                                            // on control_

    std::string path_;
    // Where supervised backends' sockets are (make_private_dir; "" until one is supervised),
    // removed with them when warmslot ends.
    struct owned_dir {
        std::string path;
        ~owned_dir() { remove_private_dir(path); }
    } sockets_;
    config::source src_;
    http_server::workers workers_;
    one_thread index_thread_;  // SQLite work never runs on an I/O worker
    one_thread file_thread_;   // slot files copied between replicas' directories
    one_thread control_;       // reloads: file reads, index opens
    routing::registry registry_;
    monitoring::monitor monitor_;
    tier::disk_tier disk_;
    service::pipeline pipeline_;
    http_server::server server_;
    net::signal_set signals_;
    const std::optional<int> reload_signal_ = reload_signal();  // SIGHUP; none on Windows
    upstream::pool save_pool_;  // slot saves before a stop, on control_
    supervisor supervisor_;
    std::unique_ptr<file_watch> watch_;
    bool stopping_ = false;  // on worker 0
};

// The runtime that request_stop() reaches, and a request that came while there was none.
std::mutex ready_mutex;
runtime* ready_runtime = nullptr;  // guarded by ready_mutex
bool stop_pending = false;         // guarded by ready_mutex

// Makes `rt` the target of request_stop(), or none (nullptr); a pending request goes to `rt`.
void set_ready_runtime(runtime* rt) {
    const std::lock_guard lock(ready_mutex);
    ready_runtime = rt;
    if (rt && std::exchange(stop_pending, false)) rt->request_stop();
}

int runtime::run(const run_options& options) {
    server_.listen();
    for (const int sig : stop_signals()) signals_.add(sig);
    if (reload_signal_) signals_.add(*reload_signal_);
    std::function<void(const error_code&, int)> on = [this, &on](const error_code& ec, int sig) {
        if (ec) return;
        on_signal(sig);
        if (sig == reload_signal_) signals_.async_wait(on);
    };
    signals_.async_wait(on);
    const auto cfg = src_.current();
    if (options.console) {
        // A stable line on stdout so scripts and tests learn the port (listen port 0 picks one).
        std::printf("warmslot listening on %s://%s:%u\n", cfg->tls.enabled() ? "https" : "http",
                    cfg->listen.host.c_str(), server_.port());
        std::fflush(stdout);
    }
    spdlog::info("listening on {}:{}{} with {} workers, {} backends", cfg->listen.host,
                 server_.port(), cfg->tls.enabled() ? " (TLS, " + cfg->tls.cert_file + ")" : "",
                 workers_.size(), cfg->backends.size());
    if (cfg->cache.isolated()) {
        // warmslot adds --cache-ram 0 to what it starts; a url backend's flags are not its own.
        for (const auto& b : cfg->backends) {
            if (!b.supervised()) {
                spdlog::warn(
                    "cache.isolation: tenant: backend {} is not started by warmslot; run "
                    "it with --cache-ram 0, or its RAM prompt cache can give one "
                    "tenant's request another tenant's cached prompt",
                    b.name);
            }
        }
    }
    // A backend about to fall asleep (--sleep-idle-seconds) keeps its valuable prefixes on disk.
    monitor_.on_quiet([this](int backend) {
        net::co_spawn(control_, save_slots(backend, std::nullopt), net::detached);
    });
    monitor_.start();
    supervisor_.start();
    watch_file();
    workers_.start();
    sd_notify::ready(fmt::format("listening on {}:{}", cfg->listen.host, server_.port()));
    if (options.on_ready) options.on_ready();
    set_ready_runtime(this);  // after the ready notifications: a pending stop comes after them
    workers_.join();
    set_ready_runtime(nullptr);
    if (watch_) watch_->stop();
    control_.join();
    index_thread_.join();
    file_thread_.join();
    // Work still pending (a start-up probe or a check cut short by the stop) is destroyed now,
    // while the registry and the rest it refers to are alive, not by the members' destructors.
    workers_.shutdown();
    control_.shutdown();
    index_thread_.shutdown();
    file_thread_.shutdown();
    spdlog::info("stopped");
    return 0;
}

// Called with ready_mutex held: the runtime is alive until set_ready_runtime(nullptr).
void runtime::request_stop() {
    net::post(workers_.context(0), [this] {
        if (stopping_) return;
        spdlog::info("stop requested: stopping (grace {} ms)",
                     src_.current()->timeouts.shutdown_grace.count());
        stop();
    });
}

void runtime::on_signal(int sig) {
    if (sig == reload_signal_) {
        net::post(control_, [this] { reload("SIGHUP"); });
        return;
    }
    spdlog::info("signal {}: stopping (grace {} ms)", sig,
                 src_.current()->timeouts.shutdown_grace.count());
    stop();
}

// Stop accepting, let requests and streams finish within the grace period, save valuable
// slots, stop supervised backends, then stop.
void runtime::stop() {
    if (std::exchange(stopping_, true)) return;
    signals_.cancel();
    sd_notify::stopping("draining requests");
    net::co_spawn(
        workers_.context(0),
        [this]() -> awaitable<void> {
            co_await server_.drain(src_.current()->timeouts.shutdown_grace);
            monitor_.stop();
            sd_notify::status("saving slots and stopping backends");
            co_await net::co_spawn(control_, shutdown_backends(), net::use_awaitable);
            workers_.stop();
        },
        net::detached);
}

awaitable<void> runtime::shutdown_backends() {
    const auto cfg = src_.current();
    for (std::size_t i = 0; i < cfg->backends.size(); ++i) {
        const auto& b = cfg->backends[i];
        if (!b.retired && !b.supervised()) co_await save_slots(static_cast<int>(i), std::nullopt);
    }
    co_await supervisor_.stop_all();  // saves each supervised backend before stopping it
}

awaitable<void> runtime::save_slots(int backend, std::optional<std::string> charge_to) {
    const auto report =
        co_await disk_.save_valuable({save_pool_, src_.current()}, backend, std::move(charge_to));
    std::size_t saved = 0;
    for (const auto& s : report.slots) saved += s.saved ? 1 : 0;
    if (saved > 0) {
        spdlog::info("backend {}: saved {} slot prefixes to disk",
                     src_.current()->backends[static_cast<std::size_t>(backend)].name, saved);
    }
}

// The config file is watched; a change reloads it like SIGHUP does.
void runtime::watch_file() {
    try {
        watch_ = std::make_unique<file_watch>(
            path_, [this] { net::post(control_, [this] { reload("file changed"); }); });
    } catch (const std::exception& e) {
        spdlog::warn("config file {} is not watched ({}); reload with SIGHUP", path_, e.what());
    }
}

void runtime::reload(const char* why) {
    sd_notify::reloading(why);
    config::config parsed;
    try {
        parsed = config::load_file(path_);
    } catch (const config::config_error& e) {
        spdlog::error("config reload ({}) rejected, the running config stays: {}", why, e.what());
        sd_notify::ready("config reload rejected; running config kept");
        return;
    }
    const auto running = src_.current();
    auto plan = config::plan_reload(*running, std::move(parsed));
    try {
        if (sockets_.path.empty() && supervises(plan.next)) sockets_.path = make_private_dir();
        assign_addresses(plan.next, sockets_.path);
        server_.reload_tls(plan.next);  // the certificate and key files, read again
    } catch (const std::exception& e) {
        spdlog::error("config reload ({}) failed, the running config stays: {}", why, e.what());
        sd_notify::ready("config reload failed; running config kept");
        return;
    }
    std::vector<bool> retired;
    for (const auto& b : plan.next.backends) retired.push_back(b.retired);
    registry_.sync(backend_names(plan.next), retired, planner_settings(plan.next.routing));
    spdlog::set_level(spdlog::level::from_str(plan.next.log.level));
    src_.publish(std::make_shared<const config::config>(std::move(plan.next)));
    disk_.sync();
    pipeline_.reconfigure(*src_.current());
    monitor_.start();
    supervisor_.sync();
    for (const auto& change : plan.changes) spdlog::info("config reload: {}", change);
    spdlog::info("config reloaded from {} ({}): {} changes to backends or listen", path_, why,
                 plan.changes.size());
    sd_notify::ready("config reloaded");
}

// Every client connection, upstream connection and slot file takes a file descriptor: the
// soft limit (often 1024) goes up to the hard limit, as far as the system lets it. When even
// that is short, accepting waits for descriptors to free up (http/server.cpp) rather than
// failing.
void raise_fd_limit(const config::config& cfg) {
#ifndef _WIN32
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
    if (r.rlim_cur < r.rlim_max) {
        rlimit raised = r;
        raised.rlim_cur = r.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
    }
    // Each client connection may hold an upstream connection too; a few dozen for the rest.
    const auto wanted = 2 * static_cast<rlim_t>(cfg.limits.max_connections) + 64;
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < wanted) {
        spdlog::warn(
            "the open file limit is {}, below the {} that limits.max_connections = {} "
            "may need; raise it (LimitNOFILE= in a systemd unit, ulimit -n)",
            static_cast<unsigned long long>(r.rlim_cur), static_cast<unsigned long long>(wanted),
            cfg.limits.max_connections);
    }
#else
    (void)cfg;
#endif
}

// Nothing else running as warmslot's user (a supervised llama-server included) may read its
// memory or /proc/<pid>/environ, where the API keys are: the process is not dumpable.
void forbid_dumps() {
#ifdef __linux__
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        spdlog::warn("could not make the process non-dumpable; its keys are readable by its user");
#endif
}

}  // namespace

routing::planner_settings planner_settings(const config::routing_settings& r) {
    routing::planner_settings s;
    s.short_request_tokens = r.short_request_tokens;
    s.long_segment_tokens = r.long_segment_tokens;
    s.scratch_slot = r.scratch_slot;
    s.scratch_min_slots = r.scratch_min_slots;
    s.max_wait_seconds = std::chrono::duration<double>(r.max_wait).count();
    return s;
}

std::vector<std::string> backend_names(const config::config& cfg) {
    std::vector<std::string> names;
    for (const auto& b : cfg.backends) names.push_back(b.name);
    return names;
}

int run(const std::string& path, config::config cfg, const run_options& options) {
    setup_logging(cfg, options);
    forbid_dumps();
    raise_fd_limit(cfg);
    std::string sockets = supervises(cfg) ? make_private_dir() : "";
    assign_addresses(cfg, sockets);
    runtime rt(path, std::move(cfg), std::move(sockets));
    return rt.run(options);
}

void request_stop() {
    const std::lock_guard lock(ready_mutex);
    if (ready_runtime) {
        ready_runtime->request_stop();
    } else {
        stop_pending = true;
    }
}

}  // namespace warmslot::app
