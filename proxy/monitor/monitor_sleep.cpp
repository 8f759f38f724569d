// A backend that puts itself to sleep (llama-server --sleep-idle-seconds N: after N idle seconds
// it unloads its model, and every slot with it; the next request loads it again). GET /slots
// would wake it and count as activity, so warmslot polling it would keep it awake for ever.
// For such a backend a check reads /metrics first (served from a cache while it sleeps, and not
// counted as activity there): while nothing ran since the last check, /slots is not read (its
// slots hold what they held). Once it has been quiet for half its sleep time, its valuable
// slots are saved (the saves count as activity: it then sleeps a full period after them); near
// its sleep time it is marked drowsy, so that a request has it checked before it is planned.
// /props says when it sleeps: its slots are then known empty, and the next request for a saved
// prefix restores it.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "monitor/monitor.hpp"
#include "routing/observations.hpp"
#include "upstream/llama_client.hpp"
#include "upstream/router_call.hpp"
#include "util/log.hpp"

namespace warmslot::monitoring {
namespace {

constexpr std::chrono::milliseconds metrics_timeout{5000};

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("routing");
    return logger;
}

// What /metrics says has run: the counters and gauges that move with every task that computes
// or generates. std::nullopt when the text has none of them.
std::optional<std::string> activity_of(std::string_view metrics) {
    constexpr std::string_view names[] = {
        "llamacpp:prompt_tokens_total ", "llamacpp:tokens_predicted_total ",
        "llamacpp:n_decode_total ", "llamacpp:requests_processing ", "llamacpp:requests_deferred "};
    std::string out;
    std::size_t at = 0;
    while (at < metrics.size()) {
        auto end = metrics.find('\n', at);
        if (end == std::string_view::npos) end = metrics.size();
        const auto line = metrics.substr(at, end - at);
        for (const auto name : names) {
            if (line.starts_with(name)) {
                out.append(line);
                out.push_back('\n');
            }
        }
        at = end + 1;
    }
    if (out.empty()) return std::nullopt;
    return out;
}

}  // namespace

std::chrono::milliseconds monitor::sleep_after(const config::backend& b) {
    if (!b.supervised()) return b.sleep_idle;
    const auto seconds = routing::sleep_idle_of(b.command);
    return seconds ? std::chrono::milliseconds(*seconds * 1000) : std::chrono::milliseconds(0);
}

awaitable<bool> monitor::let_sleep(config::backend b, std::size_t i, bool sleeping) {
    auto& st = *state_[i];
    const int idx = static_cast<int>(i);
    if (sleeping) {
        if (!std::exchange(st.asleep, true)) {
            if (b.router_model.empty())
                log()->info(
                    "backend {} sleeps (llama-server --sleep-idle-seconds): its slots "
                    "are empty until a request wakes it",
                    b.name);
            else
                log()->info(
                    "backend {}: the router has not loaded model {}: its slots are "
                    "empty until a request loads it",
                    b.name, b.router_model);
            reg_.forget_all(idx);
        }
        reg_.set_asleep(idx, true);
        reg_.set_drowsy(idx, false);
        co_return true;
    }
    if (std::exchange(st.asleep, false)) log()->info("backend {} is awake again", b.name);
    reg_.set_asleep(idx, false);
    const auto after = sleep_after(b);
    if (after.count() <= 0 || st.probe_pending) co_return false;
    const auto r =
        co_await upstream::call(pool_, b, http::verb::get, "/metrics", "", metrics_timeout);
    const auto seen = r.ec || r.status != 200 ? std::nullopt : activity_of(r.body);
    if (!seen) {
        if (!std::exchange(st.metrics_warned, true)) {
            log()->warn(
                "backend {} sleeps after {} s without work, but its /metrics does not "
                "answer: warmslot reads its slots at every check, which keeps it awake "
                "(start llama-server with --metrics)",
                b.name, after.count() / 1000);
        }
        co_return false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (*seen != st.activity) {
        st.activity = *seen;
        st.quiet_since = now;
        st.saved_quiet = false;
        reg_.set_drowsy(idx, false);
        co_return false;
    }
    const auto quiet = now - st.quiet_since;
    // Near its sleep time: one check interval and a second of slack.
    const auto margin = src_.current()->routing.reconcile_interval + std::chrono::seconds(1);
    reg_.set_drowsy(idx, quiet + margin >= after);
    if (!st.saved_quiet && quiet * 2 >= after && on_quiet_) {
        st.saved_quiet = true;
        on_quiet_(idx);
    }
    co_return true;
}

// A router's model that is not loaded is asleep too: its slots are empty, and a request for it
// has it loaded and read first (service/router_room.cpp). One never seen loaded has no slot
// layout yet: until it is read, a request that reaches it passes through.
awaitable<bool> monitor::router_unloaded(config::backend b, std::size_t i) {
    const int idx = static_cast<int>(i);
    if (!reg_.info(idx)) {
        routing::backend_info info;
        info.models = b.models;
        reg_.set_info(idx, info, false);
    }
    co_await let_sleep(b, i, true);
    // The server the router starts for it next counts its tasks from 0: not a restart.
    state_[i]->last_task = -1;
    reg_.set_healthy(idx, true);
    co_return true;
}

awaitable<std::optional<std::string>> monitor::router_state(config::backend b) {
    const auto model = b.router_model;
    b.router_model.clear();  // the router's own list
    const auto r =
        co_await upstream::call(pool_, b, http::verb::get, "/models", "", metrics_timeout);
    if (r.ec || r.status != 200) co_return std::nullopt;
    co_return upstream::read_router_state(r.body, model);
}

}  // namespace warmslot::monitoring
