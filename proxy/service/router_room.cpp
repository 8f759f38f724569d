// A request for a model a router has not loaded, while the router runs as many models as it may
// (its --models-max): the router would unload its least recently used idle model to make room,
// and every slot of that model with it. warmslot makes the room itself first: it picks that
// model (the least recently used one of the router's models with no request of warmslot's in
// flight, waiting for one to finish when all are in use), marks it asleep so that no new request
// is sent to it, saves its valuable slots, and unloads it (POST /models/unload). Then it loads
// the request's model (POST /models/load), waits until the router says it is loaded and has the
// monitor read it (its slots, and a probe when it is new), so the request is planned on a slot
// like any other: the next request for the unloaded model restores what was saved. One switch
// at a time per router: requests that come meanwhile wait for it, then look again. What was
// saved and unloaded is said in the request's X-Warmslot-Disk.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "upstream/llama_client.hpp"
#include "upstream/router_call.hpp"
#include "util/log.hpp"

namespace warmslot::service {

struct router_switches {
    std::mutex mu;
    std::set<std::string> busy;  // routers with a switch under way
};

namespace {

using routing::clock;
constexpr std::chrono::milliseconds pause{50};
constexpr std::chrono::milliseconds router_call_timeout{30'000};

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("routing");
    return logger;
}

// The router itself (no model named in its calls).
config::backend router_of(const config::backend& member) {
    auto r = member;
    r.router_model.clear();
    return r;
}

// The most recent use of any of its slots.
clock::time_point last_use(const routing::backend_view& v) {
    clock::time_point t{};
    for (const auto& s : v.slots) t = std::max(t, s.last_use);
    return t;
}

}  // namespace

std::shared_ptr<router_switches> make_router_switches() {
    return std::make_shared<router_switches>();
}

awaitable<void> pipeline::load_router_model(const config::config& cfg, int idx, upstream::pool& pool,
                                    forward_state& st, outcome& out) {
    const auto& b = cfg.backends[static_cast<std::size_t>(idx)];
    if (b.router.empty() || !reg_.asleep(idx)) co_return;
    net::steady_timer timer(co_await net::this_coro::executor);
    const auto deadline = clock::now() + cfg.timeouts.upstream_response;
    // Takes the router's turn; false when the client left or the wait ran out.
    for (;;) {
        {
            std::lock_guard lock(switches_->mu);
            if (switches_->busy.insert(b.router).second) break;
        }
        if (st.client_gone || clock::now() > deadline) co_return;
        timer.expires_after(pause);
        co_await timer.async_wait(nothrow);
    }
    struct turn {
        router_switches& s;
        const std::string& router;
        ~turn() {
            std::lock_guard lock(s.mu);
            s.busy.erase(router);
        }
    } const held{*switches_, b.router};
    if (!reg_.asleep(idx)) co_return;  // the switch before this one loaded it

    const auto props = co_await upstream::call(pool, router_of(b), http::verb::get, "/props", "",
                                               router_call_timeout);
    const auto answer = props.ec || props.status != 200
                            ? nlohmann::json()
                            : nlohmann::json::parse(props.body, nullptr, false);
    long max = 0;  // the router's --models-max (0: no limit)
    if (answer.is_object()) {
        const auto it = answer.find("max_instances");
        if (it != answer.end() && it->is_number_integer()) max = it->get<long>();
    }
    // What the router's GET /models says of a model now ("" when it does not say).
    const auto state_of = [&](const std::string& model) -> awaitable<std::string> {
        const auto r = co_await upstream::call(pool, router_of(b), http::verb::get, "/models", "",
                                               router_call_timeout);
        co_return r.ec || r.status != 200 ? std::string()
                                          : upstream::read_router_state(r.body, model);
    };
    // Waits while the model's state is one of `passing`; its last state.
    const auto settle = [&](const std::string& model,
                            std::initializer_list<std::string_view> passing) -> awaitable<std::string> {
        for (;;) {
            auto state = co_await state_of(model);
            const bool moving = std::find(passing.begin(), passing.end(), state) != passing.end();
            if (!moving || st.client_gone || clock::now() > deadline) co_return state;
            timer.expires_after(pause);
            co_await timer.async_wait(nothrow);
        }
    };
    std::string said;
    std::vector<int> unloaded_here;  // a check under way may have read them loaded
    while (max > 0 && !st.client_gone) {
        const auto views = reg_.snapshot();
        std::vector<int> loaded;
        for (std::size_t j = 0; j < cfg.backends.size() && j < views.size(); ++j) {
            const auto& m = cfg.backends[j];
            const int jdx = static_cast<int>(j);
            if (jdx == idx || m.retired || m.router != b.router || reg_.asleep(jdx)) continue;
            if (std::find(unloaded_here.begin(), unloaded_here.end(), jdx) != unloaded_here.end())
                continue;
            if (!views[j].healthy) continue;
            loaded.push_back(jdx);
        }
        if (static_cast<long>(loaded.size()) < max) break;
        int victim = -1;
        for (const int j : loaded) {
            const auto& v = views[static_cast<std::size_t>(j)];
            if (v.in_flight > 0) continue;
            if (victim < 0 || last_use(v) < last_use(views[static_cast<std::size_t>(victim)]))
                victim = j;
        }
        if (victim >= 0) {
            // No new request goes there now (they wait for this switch); one that was planned
            // there a moment ago keeps it.
            reg_.set_asleep(victim, true);
            if (reg_.snapshot()[static_cast<std::size_t>(victim)].in_flight > 0) {
                reg_.set_asleep(victim, false);
                victim = -1;
            }
        }
        if (victim < 0) {
            if (clock::now() > deadline) break;  // the router queues the request itself
            timer.expires_after(pause);
            co_await timer.async_wait(nothrow);
            continue;
        }
        const auto& v = cfg.backends[static_cast<std::size_t>(victim)];
        std::size_t saved = 0, kept = 0;
        std::uint64_t tokens = 0;
        if (disk_) {
            const auto report = co_await disk_->save_valuable(
                pool, victim, out.caller ? std::optional(out.caller->tenant) : std::nullopt);
            for (const auto& s : report.slots) {
                if (s.saved) {
                    saved += 1;
                    tokens += s.tokens;
                } else if (s.reason == "already on disk") {
                    kept += 1;
                }
            }
        }
        const auto r = co_await upstream::call(
            pool, router_of(b), http::verb::post, "/models/unload",
            nlohmann::json{{"model", v.router_model}}.dump(), router_call_timeout);
        // The router stops the model's server after it answers: its place is free once
        // GET /models says so.
        const bool unloaded = !r.ec && r.status == 200 &&
                              co_await settle(v.router_model, {"loaded", "sleeping"}) == "unloaded";
        reg_.set_asleep(victim, true);
        reg_.forget_all(victim);
        unloaded_here.push_back(victim);
        std::string what;
        if (saved > 0)
            what = fmt::format("{} slot{} saved ({} tokens)", saved, saved == 1 ? "" : "s", tokens);
        if (kept > 0) what += fmt::format("{}{} already on disk", what.empty() ? "" : ", ", kept);
        if (what.empty()) what = "nothing new to save";
        if (unloaded) {
            log()->info("backend {}: unloaded model {} to load {} ({})", b.name, v.router_model,
                        b.router_model, what);
        } else {
            log()->warn("backend {}: could not unload model {} ({}) to load {}; {}", b.name,
                        v.router_model, r.ec ? r.ec.message() : "HTTP " + std::to_string(r.status),
                        b.router_model, what);
        }
        said += fmt::format("{}{} {}: {}", said.empty() ? "" : "; ",
                            unloaded ? "unloaded" : "could not unload", v.router_model, what);
        if (!unloaded) break;  // the router makes its own room
    }
    out.disk.unloaded = std::move(said);
    if (st.client_gone) co_return;
    // Loaded now, and read, before the request is planned.
    const auto start = clock::now();
    const auto asked = co_await upstream::call(
        pool, router_of(b), http::verb::post, "/models/load",
        nlohmann::json{{"model", b.router_model}}.dump(), router_call_timeout);
    bool loaded = false;
    if (!asked.ec && (asked.status == 200 || asked.status == 400)) {  // 400: already running
        const auto state = co_await settle(b.router_model, {"loading", "downloading", "downloaded"});
        loaded = state == "loaded" || state == "sleeping";
    } else {
        log()->warn("backend {}: the router did not load model {} ({}); the request goes to it "
                    "as it is",
                    b.name, b.router_model,
                    asked.ec ? asked.ec.message() : "HTTP " + std::to_string(asked.status));
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
    out.waited += fmt::format("{}model load {}ms{}", out.waited.empty() ? "" : ", ", ms,
                              loaded ? "" : " (not loaded)");
    if (loaded) co_await await_checks(cfg, idx, st, out, "check after load");
    // Loaded (or the router loads it for the request): counted among the loaded models.
    if (!st.client_gone) reg_.set_asleep(idx, false);
}

}  // namespace warmslot::service
