// Forwarding one request: plan -> prepare_slot -> forward -> relay -> record.
//
// The planner picks backend and slot from what the registry believes; a pinned request carries
// `id_slot`. A client_watch (relay.hpp) peeks at the client socket once the exchange has run
// for watch_list::delay and closes the upstream socket as soon as the client goes, so
// llama-server cancels the task and frees the slot. Failover happens only before the first
// byte reached the client.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/chat_view.hpp"
#include "api/endpoints.hpp"
#include "api/session_hint.hpp"
#include "service/forwarding.hpp"
#include "service/wakeup.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot::service {
namespace {

using routing::clock;

// The first session header of the request ("" when none): see api/session_hint.hpp.
std::string_view session_header(const http::request<http::string_body>& req) {
    for (const std::string_view name : api::session_headers) {
        if (const auto it = req.find(name); it != req.end()) return it->value();
    }
    return {};
}

prompt_view view_of(api::api_shape shape, const nlohmann::json* body) {
    prompt_view v;
    v.body = body;
    if (body == nullptr) return v;
    switch (shape) {
        case api::api_shape::none: return v;
        case api::api_shape::completion:
            v.fp = routing::fingerprint_request(routing::request_kind::completion, *body);
            return v;
        case api::api_shape::chat: v.chat_shape = true; break;
        case api::api_shape::responses:
        case api::api_shape::messages: v.converted = api::to_chat_view(shape, *body); break;
    }
    if (const auto* chat = v.chat()) {
        v.fp = routing::fingerprint_request(routing::request_kind::chat, *chat);
    }
    // The client's cache breakpoint is the end of its stable prefix (what the disk tier keeps).
    if (v.fp && v.converted && v.converted->breakpoint &&
        *v.converted->breakpoint < v.fp->levels.size()) {
        v.fp->stable_levels = *v.converted->breakpoint;
    }
    return v;
}

// Requests whose task may run on a slot: everything but tokenizer and template calls.
bool may_take_slot(const request_class& cls, std::string_view target) {
    if (cls.ep.kind != api::endpoint_kind::forward_json) return false;
    const auto path = api::path_of(target);
    return path != "/tokenize" && path != "/detokenize" && path != "/apply-template" &&
           path != "/v1/messages/count_tokens";
}

// `n` (or `n_cmpl`) > 1 runs child tasks on other idle slots llama-server picks: such a request
// is never pinned.
bool fans_out(const nlohmann::json* body) {
    if (body == nullptr || !body->is_object()) return false;
    for (const char* key : {"n", "n_cmpl"}) {
        const auto it = body->find(key);
        if (it != body->end() && it->is_number() && it->get<double>() > 1) return true;
    }
    return false;
}
// How long a request waits for the monitor to check backends (at start-up, or after a sign of
// a restart) before it is sent on what warmslot believes then.
constexpr auto check_wait = std::chrono::seconds(10);

std::int64_t elapsed_ms(clock::time_point since) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - since).count();
}

}  // namespace

// Waits until the slot a wait_hit plan chose is idle and takes it. False: gave up. Woken by
// the registry when a slot is released, never polling it.
awaitable<bool> pipeline::wait_for_slot(const config::config& cfg, routing::ticket& t,
                                        forward_state& st) {
    // Waiting longer than recomputing the held prefix would take is not worth it.
    const auto worth = std::chrono::duration_cast<clock::duration>(
        std::chrono::duration<double>(std::max(0.005, t.saved_prefill_seconds)));
    const auto limit = std::min<clock::duration>(cfg.routing.max_wait, worth);
    co_return co_await wait_until(
        *wakeups_, [&] { return reg_.try_take(t, clock::now()); }, clock::now() + limit,
        [&] { return st.client_gone; });
}

// Waits until no slot of `backend` is being prepared, at most as long as one priming may take.
// Woken by the registry, never polling.
awaitable<void> pipeline::wait_for_preparations(const config::config& cfg, int backend,
                                                forward_state& st) {
    if (!reg_.preparing(backend)) co_return;
    co_await wait_until(
        *wakeups_, [&] { return !reg_.preparing(backend); },
        clock::now() + cfg.timeouts.upstream_response, [&] { return st.client_gone; });
}

// Asks the monitor to check `backend` (-1: every active one of the request's config) now, and
// waits, at most check_wait, until it has.
awaitable<void> pipeline::await_checks(const config::config& cfg, int backend, forward_state& st,
                                       outcome& out, const char* why) {
    std::vector<std::pair<int, std::uint64_t>> targets;
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        const int idx = static_cast<int>(i);
        if ((backend >= 0 && idx != backend) || cfg.backends[i].retired) continue;
        targets.emplace_back(idx, reg_.want_check(idx));
    }
    const auto start = clock::now();
    const bool done = co_await wait_until(
        *wakeups_,
        [&] {
            return std::all_of(targets.begin(), targets.end(), [&](const auto& x) {
                return reg_.checks_done(x.first) >= x.second;
            });
        },
        start + check_wait, [&] { return st.client_gone; });
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
    out.waited += fmt::format("{}{} {}ms{}", out.waited.empty() ? "" : ", ", why, ms,
                              done ? "" : " (gave up)");
}

// A request without its own adapters on a slot where one with them ran would reuse KV the base
// model never computed (llama-server clears a slot only for a task that names adapters), and
// warmslot would then save it as the base model's: such a slot is erased first. A pinned
// request needs only its slot; a floating one may land on any such idle slot.
awaitable<void> pipeline::clear_adapter_kv(upstream::pool& pool, const config::config& cfg,
                                           int backend, routing::ticket& t, bool floating) {
    const auto& b = cfg.backends[static_cast<std::size_t>(backend)];
    if (reg_.take_adapter(backend, *t.p.slot)) {
        if (co_await upstream::erase_slot(pool, b, *t.p.slot, cfg.cache.slot_call_timeout)) {
            reg_.set_held(t, {}, 0);
        } else {
            reg_.mark_adapter(backend, *t.p.slot);  // tried again by the next one
        }
    }
    for (int n = 0; floating && n < 4096; ++n) {
        auto marked = reg_.reserve_marked_idle(backend);
        if (!marked) break;
        routing::reservation other(reg_, std::move(*marked));
        bool erased = false;
        if (reg_.take_adapter(backend, *other->p.slot)) {
            erased =
                co_await upstream::erase_slot(pool, b, *other->p.slot, cfg.cache.slot_call_timeout);
        }
        if (erased) reg_.set_held(*other, {}, 0);
        other.release();
        if (!erased) break;
    }
}

// plan -> prepare_slot -> send -> relay: one request's forwarding, on one request-scoped object
// (service/forwarding.hpp).
awaitable<void> pipeline::forward(http_server::exchange& ex, outcome& out,
                                  const nlohmann::json* body) {
    forwarding f(ex, out, body, *pools_[ex.worker]);
    const auto& cfg = f.cfg;
    const auto shape = out.cls.ep.shape;
    if (cfg.routing.enabled && !fans_out(body)) f.view = view_of(shape, body);
    if (f.view.fp) {
        f.view.fp->session = api::session_hint(body, session_header(ex.request));
        f.view.fp->floating = !takes_id_slot(shape);
    }
    f.takes_slot = may_take_slot(out.cls, std::string_view(ex.request.target()));
    admission admitted;  // held to the end of the request
    if (!co_await admit(f, admitted)) co_return;
    // After the wake: a backend it started may be the one that makes the backends serve more
    // than one model file (its model is read once it is healthy).
    f.model = by_model(cfg, reg_) ? out.cls.model : std::string();
    co_await ready_backends(f);
    // Ends however this coroutine ends: an exception or a destroyed coroutine cancels it.
    f.r = routing::reservation(reg_, plan_now(f, true));
    if (f.r->p.backend < 0 && !f.r->p.unknown_model) {
        // No backend is ready: warmslot is starting, or each one is down or being checked.
        // The monitor looks now; the request is planned on what it then knows.
        co_await await_checks(cfg, -1, f.st, out, "readiness");
        f.r = routing::reservation(reg_, plan_now(f, true));
        co_await wait_for_backend(f, "backend");
    }
    if (f.r->p.backend < 0 && f.r->p.unknown_model) {
        std::string message = "unknown model \"" + f.model + "\"; GET /v1/models lists them";
        co_await fail(ex, out, api::error_kind::not_found, std::move(message));
        co_return;
    }
    {
        const watch_list::entry watched(*watches_[ex.worker], *ex.client, f.st);
        co_await run_rounds(f);
    }
    out.client_gone = f.st.client_gone && !f.st.answered;
    if (f.st.client_gone) {
        ex.keep_alive = false;
        co_return;
    }
    if (!f.st.headers_sent) co_await fail_unsent(f);
}

// A new plan for the request on what the registry believes now. `allow_wait`: it may wait for
// the slot that holds its prefix (a wait_hit plan).
routing::ticket pipeline::plan_now(forwarding& f, bool allow_wait) {
    const auto& fp = f.view.fp;
    const std::uint64_t bytes = fp ? fp->total_bytes : f.ex.request.body().size();
    // Backends the registry added by a reload after this request took its config are not
    // candidates: the request's backend list is the one it indexes.
    return reg_.reserve(
        fp ? &*fp : nullptr, f.model, bytes, clock::now(), allow_wait, f.cfg.backends.size(),
        f.takes_slot, f.out.caller ? f.out.caller->tenant : std::string(), f.cfg.cache.isolated());
}

// Supervised backends that could serve the request are started first (only those are started
// on demand). False: the request ended here (its client left, or it was answered an error).
awaitable<bool> pipeline::admit(forwarding& f, admission& admitted) {
    const auto& cfg = f.cfg;
    const bool any_supervised =
        std::any_of(cfg.backends.begin(), cfg.backends.end(),
                    [](const config::backend& b) { return b.supervised(); });
    if (starter_ && any_supervised) {
        // The client is watched while it waits for a backend to start: one that leaves gives
        // up its wait (and its place in a swap group's queue) at once.
        const watch_list::entry watched(*watches_[f.ex.worker], *f.ex.client, f.st);
        admitted = co_await starter_->wake(cfg, f.out.cls.model,
                                           f.out.caller ? f.out.caller->tenant : std::string(),
                                           [&st = f.st] { return st.client_gone; });
    }
    if (f.st.client_gone) {
        f.out.client_gone = true;
        f.ex.keep_alive = false;
        co_return false;
    }
    if (!admitted.error.empty()) {
        co_await fail_starting(f.ex, f.out, admitted);
        co_return false;
    }
    co_return true;
}

// The request's plan has no backend and it names no unknown model. When a backend that answered
// before does not now (it restarts, reloads its model, or its host is gone:
// registry::set_returning), the request waits for it to be read again, at most the longest
// start_timeout among its backends (what a supervised start is given; 120 s by default), and is
// planned on what its slots hold then (a restarted one's: nothing, so its prefix is restored
// from disk). Otherwise, or past that, it goes on without a plan to whatever answers, as a
// failover.
awaitable<void> pipeline::wait_for_backend(forwarding& f, const char* why) {
    if (f.r->p.backend >= 0 || f.r->p.unknown_model || f.st.client_gone) co_return;
    const auto& cfg = f.cfg;
    clock::duration limit{0};
    for (const auto& b : cfg.backends) {
        if (!b.retired) limit = std::max<clock::duration>(limit, b.start_timeout);
    }
    const std::size_t known = cfg.backends.size();
    if (!reg_.any_returning(known)) co_return;
    const auto start = clock::now();
    const bool ready = co_await wait_until(
        *wakeups_, [&] { return reg_.any_ready(known) || !reg_.any_returning(known); },
        start + limit, [&st = f.st] { return st.client_gone; });
    f.out.waited += fmt::format("{}{} {}ms{}", f.out.waited.empty() ? "" : ", ", why,
                                elapsed_ms(start), ready ? "" : " (gave up)");
    if (f.st.client_gone) co_return;
    f.r = routing::reservation(reg_, plan_now(f, true));
}

// Before the first plan: what the backends' slots hold is made known where it may have changed.
awaitable<void> pipeline::ready_backends(forwarding& f) {
    const auto& cfg = f.cfg;
    const std::size_t known = cfg.backends.size();
    // A backend that may have fallen asleep since its last check (llama-server
    // --sleep-idle-seconds empties its slots) is checked first: the request is then planned on
    // what its slots hold (monitor/monitor_sleep.cpp).
    for (std::size_t i = 0; i < known; ++i) {
        const int idx = static_cast<int>(i);
        if (reg_.drowsy(idx)) co_await await_checks(cfg, idx, f.st, f.out, "sleep check");
    }
    // A router's model that is not loaded is loaded first (another one saved and unloaded
    // when the router has no room), and read, so the request is planned on its slots.
    const auto& model = f.out.cls.model;
    for (std::size_t i = 0; i < known && !model.empty(); ++i) {
        const auto& m = cfg.backends[i];
        if (m.router.empty() || m.retired || !reg_.asleep(static_cast<int>(i))) continue;
        if (std::find(m.models.begin(), m.models.end(), model) == m.models.end()) continue;
        const watch_list::entry watched(*watches_[f.ex.worker], *f.ex.client, f.st);
        co_await load_router_model(cfg, static_cast<int>(i), f.pool, f.st, f.out);
    }
    if (cfg.routing.enabled && f.view.fp) co_await settle_floating(cfg, f.pool, f.st);
}

// The request's rounds: wait for its slot if the plan says so, send, and after a sign of a
// restart check the backend and plan again.
awaitable<void> pipeline::run_rounds(forwarding& f) {
    auto& t = f.r;
    const auto& cfg = f.cfg;
    for (int round = 0; !f.st.client_gone; ++round) {
        if (t->p.why == routing::route::wait_hit) {
            const auto start = clock::now();
            if (!co_await wait_for_slot(cfg, *t, f.st)) {
                t.release();  // never took the slot: nothing is known of it but the wait
                if (f.st.client_gone) co_return;
                t = routing::reservation(reg_, plan_now(f, false));
            }
            f.waited_ms = elapsed_ms(start);
        }
        const auto held = co_await hold_until_idle(f);
        if (held == hold_end::client_gone) co_return;
        if (held == hold_end::no_slot) break;
        // Planned again while it was held: its backend may have gone down meanwhile.
        co_await wait_for_backend(f, "backend");
        if (f.st.client_gone) co_return;
        const auto last = co_await send(f, round == 0);
        if (last.what == send_result::end::answered) co_return;
        if (last.what == send_result::end::failed || f.st.client_gone) break;
        // The planned backend may have restarted: what its slots hold is checked before the
        // request is planned again (and its prefix restored from disk). Nothing reached the
        // slot: its belief stays for the check to confirm or correct. That holds for a floating
        // request too (llama-server never got it): forgetting here would plan it anew as a miss
        // and prepare another slot over the one that holds its conversation.
        if (t->p.slot) {
            t.release();
        } else {
            t.cancel();
        }
        co_await await_checks(cfg, last.backend->id(), f.st, f.out, "restart check");
        if (f.st.client_gone) co_return;  // planned for nobody: nothing to end
        t = routing::reservation(reg_, plan_now(f, true));
        co_await wait_for_backend(f, "restart");
    }
    t.end();  // forgets what the slot holds only when the request may have reached it
}

// No idle slot means llama-server's queue, which hands the request the first slot to free up,
// whoever's prompt it holds, before anything of that prompt is saved. It waits here instead,
// and is planned on the slot that frees up: its own prefix, or one restored from disk. Under
// tenant isolation always; else a request worth a slot (not a one-off), until
// routing.max_wait, and then into llama-server's queue.
awaitable<hold_end> pipeline::hold_until_idle(forwarding& f) {
    auto& t = f.r;
    const auto& cfg = f.cfg;
    const bool isolated = cfg.cache.isolated();
    if (!cfg.routing.enabled || !f.takes_slot || !f.view.fp || t->p.backend < 0 || t->p.slot ||
        !(isolated || t->p.why == routing::route::miss_slot_busy)) {
        co_return hold_end::go;
    }
    const auto start = clock::now();
    bool got = true;
    if (isolated) {
        got = co_await wait_for_idle(
            cfg, t, [&] { return plan_now(f, false); }, f.st);
    } else {
        co_await hold_for_slot(
            cfg, f.pool, t, [&] { return plan_now(f, false); }, f.st);
    }
    if (f.st.client_gone) co_return hold_end::client_gone;
    f.waited_ms += elapsed_ms(start);
    if (got) co_return hold_end::go;
    f.st.isolation_wait_failed = true;
    co_return hold_end::no_slot;
}

// The error answer of a request that got none from a backend.
awaitable<void> pipeline::fail_unsent(forwarding& f) {
    if (f.st.isolation_wait_failed) {
        co_await fail(f.ex, f.out, api::error_kind::backend_unavailable,
                      "no slot came free within routing.max_wait; tenant isolation keeps "
                      "requests out of llama-server's queue");
        co_return;
    }
    const auto& error = f.st.last_error;  // the last backend tried
    // Built before the co_await: g++ 12 mishandles temporaries of a conditional expression
    // inside a co_await (they are destroyed twice).
    const bool timeout = error == beast::error::timeout;
    const auto kind =
        timeout ? api::error_kind::upstream_timeout : api::error_kind::backend_unreachable;
    std::string message = "no backend could be reached: " + error.message();
    if (!error) message = "no backend could be reached";  // none was tried
    if (timeout) message = "the backend did not answer in time";
    co_await fail(f.ex, f.out, kind, std::move(message));
}

}  // namespace warmslot::service
