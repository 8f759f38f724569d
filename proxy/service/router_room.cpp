// A request for a model a router has not loaded, while the router runs as many models as it may
// (its --models-max): the router would unload its least recently used idle model to make room,
// and every slot of that model with it. warmslot makes the room itself first. It picks the model
// to unload: the least recently used one that nobody uses (no request of warmslot's in flight,
// none waiting for it), else the least recently used one loaded at least `min_residency` ago
// (a model just loaded keeps its place while it is used, so two busy models do not take turns
// request by request); when none qualifies, it waits. It marks that model asleep, so new requests
// for it wait, waits for its requests in flight to end (a switch never cuts one), saves its
// valuable slots, and unloads it (POST /models/unload, then until GET /models says so). Then it
// loads the request's model (POST /models/load), waits until the router says it is loaded and
// has the monitor read it (its slots, and a probe when it is new), so the request is planned on
// a slot like any other: the next request for the unloaded model restores what was saved. One
// switch at a time per router; a request whose model another switch loaded meanwhile goes at
// once. What was saved and unloaded is said in the request's X-Warmslot-Disk.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
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
    std::set<std::string> busy;          // routers with a switch under way
    std::map<int, std::size_t> waiting;  // requests waiting for a model, by backend
    std::map<int, routing::clock::time_point> loaded_at;  // when a switch loaded it
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

awaitable<void> pipeline::load_router_model(const config::config& cfg, int idx,
                                            upstream::pool& pool, forward_state& st, outcome& out) {
    const auto& b = cfg.backends[static_cast<std::size_t>(idx)];
    if (b.router.empty() || !reg_.asleep(idx)) co_return;
    net::steady_timer timer(co_await net::this_coro::executor);
    const auto deadline = clock::now() + cfg.timeouts.upstream_response;
    auto& sw = *switches_;
    struct waiter {
        router_switches& s;
        int model;
        waiter(router_switches& all, int backend) : s(all), model(backend) {
            std::lock_guard lock(s.mu);
            s.waiting[model] += 1;
        }
        ~waiter() {
            std::lock_guard lock(s.mu);
            s.waiting[model] -= 1;
        }
    } const waits{sw, idx};
    // Takes the router's turn; returns when the client left, the wait ran out, or another
    // switch loaded the model meanwhile.
    for (;;) {
        {
            std::lock_guard lock(sw.mu);
            if (sw.busy.insert(b.router).second) break;
        }
        if (st.client_gone || clock::now() > deadline || !reg_.asleep(idx)) co_return;
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
    } const held{sw, b.router};
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
        if (r.ec || r.status != 200) co_return std::string();
        co_return upstream::read_router_state(r.body, model).value_or("");
    };
    // Waits while the model's state is one of `passing`; its last state.
    const auto settle =
        [&](const std::string& model,
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
        const auto now = clock::now();
        int victim = -1;
        bool idle_victim = false;
        {
            std::lock_guard lock(sw.mu);
            for (const int j : loaded) {
                const auto& v = views[static_cast<std::size_t>(j)];
                const auto w = sw.waiting.find(j);
                const bool idle = v.in_flight == 0 && (w == sw.waiting.end() || w->second == 0);
                const auto at = sw.loaded_at.find(j);
                const bool resident =
                    at == sw.loaded_at.end() || now - at->second >= b.min_residency;
                if (!idle && !resident) continue;
                // Idle ones first, then the least recently used.
                const bool better =
                    victim < 0 || (idle && !idle_victim) ||
                    (idle == idle_victim &&
                     last_use(v) < last_use(views[static_cast<std::size_t>(victim)]));
                if (better) {
                    victim = j;
                    idle_victim = idle;
                }
            }
        }
        if (victim < 0) {
            if (now > deadline) break;  // the router queues the request itself
            timer.expires_after(pause);
            co_await timer.async_wait(nothrow);
            continue;
        }
        // No new request goes there now (they wait, like this one); those in flight end.
        reg_.set_asleep(victim, true);
        while (reg_.snapshot()[static_cast<std::size_t>(victim)].in_flight > 0 &&
               clock::now() < deadline && !st.client_gone) {
            timer.expires_after(pause);
            co_await timer.async_wait(nothrow);
        }
        if (reg_.snapshot()[static_cast<std::size_t>(victim)].in_flight > 0) {
            reg_.set_asleep(victim, false);
            break;  // still in use: the router queues the request itself
        }
        const auto& v = cfg.backends[static_cast<std::size_t>(victim)];
        std::size_t saved = 0, kept = 0;
        std::uint64_t tokens = 0;
        std::string skipped;  // why the others were not saved, for the log
        if (disk_) {
            const auto report = co_await disk_->save_valuable(
                {pool, out.cfg}, victim,
                out.caller ? std::optional(out.caller->tenant) : std::nullopt);
            for (const auto& s : report.slots) {
                if (s.saved) {
                    saved += 1;
                    tokens += s.tokens;
                } else if (s.reason == "already on disk") {
                    kept += 1;
                } else {
                    skipped += fmt::format("; slot {}: {}", s.slot, s.reason);
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
        unloaded_here.push_back(victim);
        if (unloaded) {
            reg_.forget_all(victim);
            // A check that read it loaded before the unload may end after it: the check asked
            // for now reads it unloaded, and no request meets it believed loaded.
            co_await await_checks(cfg, victim, st, out, "check after unload");
        } else {
            reg_.set_asleep(victim, false);  // still loaded, and what it holds still known
        }
        std::string what;
        if (saved > 0)
            what = fmt::format("{} slot{} saved ({} tokens)", saved, saved == 1 ? "" : "s", tokens);
        if (kept > 0) what += fmt::format("{}{} already on disk", what.empty() ? "" : ", ", kept);
        if (what.empty()) what = "nothing new to save";
        if (unloaded) {
            log()->info("backend {}: unloaded model {} to load {} ({}{})", b.name, v.router_model,
                        b.router_model, what, skipped);
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
    const auto asked = co_await upstream::call(pool, router_of(b), http::verb::post, "/models/load",
                                               nlohmann::json{{"model", b.router_model}}.dump(),
                                               router_call_timeout);
    bool loaded = false;
    if (!asked.ec && (asked.status == 200 || asked.status == 400)) {  // 400: already running
        const auto state =
            co_await settle(b.router_model, {"loading", "downloading", "downloaded"});
        loaded = state == "loaded" || state == "sleeping";
    } else {
        log()->warn(
            "backend {}: the router did not load model {} ({}); the request goes to it "
            "as it is",
            b.name, b.router_model,
            asked.ec ? asked.ec.message() : "HTTP " + std::to_string(asked.status));
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
    out.waited += fmt::format("{}model load {}ms{}", out.waited.empty() ? "" : ", ", ms,
                              loaded ? "" : " (not loaded)");
    if (loaded) {
        {
            std::lock_guard lock(sw.mu);
            sw.loaded_at[idx] = clock::now();
        }
        co_await await_checks(cfg, idx, st, out, "check after load");
    }
    // Loaded (or the router loads it for the request): counted among the loaded models.
    if (!st.client_gone) reg_.set_asleep(idx, false);
}

}  // namespace warmslot::service
