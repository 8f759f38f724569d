// Forwarding one request: plan -> prepare_slot -> forward -> relay -> record.
//
// The planner picks backend and slot from what the registry believes; a pinned request carries
// `id_slot`. A client_watch (relay.hpp) peeks at the client socket once the exchange has run
// for watch_list::delay and closes the upstream socket as soon as the client goes, so
// llama-server cancels the task and frees the slot. Failover happens only before the first
// byte reached the client.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/chat_view.hpp"
#include "api/endpoints.hpp"
#include "api/forward_headers.hpp"
#include "api/keepalive.hpp"
#include "api/session_hint.hpp"
#include "routing/reservation.hpp"
#include "service/keepalive.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "service/wakeup.hpp"
#include "upstream/llama_client.hpp"
#include "upstream/router_call.hpp"

namespace warmslot::service {

// What the cache reads a request's prompt from: the body itself for chat and completions, the
// chat body llama-server renders for Responses and Messages (api/chat_view.hpp).
struct prompt_view {
    const nlohmann::json* body = nullptr;     // the client's body
    std::optional<api::chat_view> converted;  // its chat view (Responses, Messages)
    bool chat_shape = false;
    std::optional<routing::fingerprint> fp;
    // The chat body the disk tier renders; null for completions and unreadable bodies.
    const nlohmann::json* chat() const {
        if (converted) return &converted->body;
        return chat_shape ? body : nullptr;
    }
};

namespace {

using routing::clock;

enum class attempt { relayed, stale_connection, backend_failed };

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
        case api::api_shape::none:
            return v;
        case api::api_shape::completion:
            v.fp = routing::fingerprint_request(routing::request_kind::completion, *body);
            return v;
        case api::api_shape::chat:
            v.chat_shape = true;
            break;
        case api::api_shape::responses:
        case api::api_shape::messages:
            v.converted = api::to_chat_view(shape, *body);
            break;
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

// llama-server rebuilds an Anthropic Messages body from the fields it knows, so an id_slot in it
// never reaches the slot choice: such requests float (routing::registry::mark_floating).
bool takes_id_slot(api::api_shape shape) { return shape != api::api_shape::messages; }

// Whether the request's "model" picks the backend: several model files, or a router's models
// (told apart by name even when one file serves two of them).
bool by_model(const config::config& cfg, const routing::registry& reg) {
    return reg.multi_model() ||
           std::any_of(cfg.backends.begin(), cfg.backends.end(),
                       [](const config::backend& b) { return !b.router.empty(); });
}

// A floating request finds the slot warmslot prepares only when llama-server's similarity rule
// picks it (routing/planner.hpp, rule 10): a prefix that is a small share of the prompt may not
// make it the best match, and preparing it would be wasted. Pinned requests always find it.
bool worth_preparing(const routing::fingerprint& fp) {
    if (!fp.floating) return true;
    if (fp.stable_levels == 0 || fp.stable_levels > fp.levels.size() || fp.total_bytes == 0) {
        return false;
    }
    const auto prefix = static_cast<double>(fp.levels[fp.stable_levels - 1].bytes);
    return prefix > 2 * routing::floating_similarity * static_cast<double>(fp.total_bytes);
}

// The body to send, as pieces of the client's body (which lives to the end of the request):
// pinned to `slot` by a field inserted after its opening brace, or rewritten without any id_slot
// the client may have sent (a client's id_slot could name a busy slot, which can hang
// llama-server).
struct outgoing_body {
    std::string_view before;  // the client's body up to its opening brace, or all of it
    std::string field;        // inserted after `before`
    std::string_view after;
    std::string owned;        // a rewritten body, sent instead of the pieces
    std::size_t size() const {
        return owned.empty() ? before.size() + field.size() + after.size() : owned.size();
    }
};

outgoing_body prepared_body(const std::string& body, const nlohmann::json* parsed,
                            std::optional<int> slot, const config::backend& b) {
    outgoing_body out;
    const bool client_pinned = parsed && parsed->contains("id_slot");
    // A router's model is named first: a `model` the client sent comes later and wins. Only
    // in a JSON object (never in a multipart upload that happens to hold a brace).
    const auto brace = body.find('{');
    const bool object = brace != std::string::npos &&
                        body.find_first_not_of(" \t\r\n") == brace;
    const std::string model = object ? upstream::router_model_field(b) : std::string();
    if ((!slot && !client_pinned && model.empty()) || brace == std::string::npos) {
        out.before = body;
        return out;
    }
    if (client_pinned) {
        nlohmann::json copy = *parsed;
        if (slot) copy["id_slot"] = *slot;
        else copy.erase("id_slot");
        if (!model.empty() && !copy.contains("model")) copy["model"] = b.router_model;
        out.owned = copy.dump();
        return out;
    }
    const auto next = body.find_first_not_of(" \t\r\n", brace + 1);
    const bool empty_object = next != std::string::npos && body[next] == '}';
    out.before = std::string_view(body).substr(0, brace + 1);
    out.field = slot ? fmt::format("\"id_slot\":{}", *slot) : "";
    if (!model.empty()) out.field += (out.field.empty() ? "" : ",") + model;
    if (!empty_object) out.field += ",";
    out.after = std::string_view(body).substr(brace + 1);
    return out;
}

// The request line and headers sent to the backend: the client's end-to-end headers in their
// order, then Host and, when the method or the body calls for it, Content-Length. The bytes
// Beast writes for such a message after prepare_payload, without building one.
std::string upstream_head(const http::request<http::string_body>& in, const config::backend& b,
                          std::size_t body_size) {
    std::string head;
    head.reserve(512);
    head.append(std::string_view(in.method_string())).append(" ");
    // A read names a router's model in its query (a write, in its body: prepared_body).
    if (in.method() == http::verb::get)
        head.append(upstream::router_target(b, std::string(in.target()), false));
    else
        head.append(std::string_view(in.target()));
    head.append(" HTTP/1.1\r\n");
    for (const auto& field : in) {
        const std::string_view name(field.name_string());
        if (!api::forward_request_header(name)) continue;
        head.append(name).append(": ").append(std::string_view(field.value())).append("\r\n");
    }
    head.append("Host: ").append(upstream::host_header(b.host, b.port)).append("\r\n");
    if (const auto key = b.current_child_key(); !key.empty())  // its process takes only this one
        head.append("Authorization: Bearer ").append(key).append("\r\n");
    const auto m = in.method();
    if (body_size > 0 || m == http::verb::options || m == http::verb::put || m == http::verb::post) {
        head.append("Content-Length: ").append(std::to_string(body_size)).append("\r\n");
    }
    head.append("\r\n");
    return head;
}

std::string route_header(const routing::plan& p, std::int64_t waited_ms) {
    // A request held for a slot (every slot was busy) says how long, after its route on it.
    if (waited_ms > 0 && p.why != routing::route::wait_hit) {
        return fmt::format("{}; waited_ms={}", route_header(p, 0), waited_ms);
    }
    switch (p.why) {
        case routing::route::hit: return "hit";
        case routing::route::wait_hit: return fmt::format("hit; waited_ms={}", waited_ms);
        case routing::route::miss_new_prefix: return "miss; reason=new_prefix";
        case routing::route::miss_evicted: return "miss; reason=evicted";
        case routing::route::miss_slot_busy: return "miss; reason=slot_busy";
        case routing::route::miss_diverged:
            return fmt::format("miss; reason=diverged; message={}", p.diverged_at);
        case routing::route::scratch: return "scratch";
        case routing::route::pass_through: return "pass_through";
    }
    return "pass_through";
}

// Waits until the backend's body has begun: its first bytes are read into the connection's
// buffer, where the relay's parser finds them. A read that fails leaves the failure for the
// relay's next read to meet (eof again, a passed deadline cuts it again, a closed socket fails).
awaitable<void> await_body_bytes(upstream::connection& up, const config::config& cfg) {
    up.stream.expires_after(cfg.timeouts.upstream_response);
    const auto room = up.buffer.prepare(16 * 1024);
    const auto [ec, n] = co_await up.stream.async_read_some(room, nothrow);
    up.buffer.commit(n);
}

// One try against one backend over one connection.
awaitable<attempt> try_backend(http_server::exchange& ex, upstream::connection& up,
                               forward_state& st, outcome& out, const config::config& cfg,
                               const config::backend& b, outgoing_body body, header_list extra) {
    const std::string head = upstream_head(ex.request, b, body.size());
    const std::array<net::const_buffer, 4> request{net::buffer(head),
        body.owned.empty() ? net::buffer(body.before) : net::buffer(body.owned),
        net::buffer(body.field), net::buffer(body.after)};
    up.stream.expires_after(cfg.timeouts.connect);
    auto [ec, n] = co_await net::async_write(up.stream, request, nothrow);
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) {
        up.stream.expires_after(cfg.timeouts.upstream_response);
        std::tie(ec, n) = co_await http::async_read_header(up.stream, up.buffer, p, nothrow);
        if (!ec && st.on_started) st.on_started();
    }
    if (ec) {
        st.last_error = ec;
        co_return upstream::stale(up, ec) ? attempt::stale_connection : attempt::backend_failed;
    }
    // The backend answers: the keep-alive ends here, and its head, when it went out, is the
    // answer's. llama-server sends its head when the task starts and then nothing until its
    // first event (pings come at its --sse-ping-interval, if at all): a stream whose head is out
    // keeps its keep-alive until the body begins, so it is never silent longer than the interval.
    if (out.keeper) {
        if (out.keeper->head_sent() && !p.is_done() && up.buffer.size() == 0)
            co_await await_body_bytes(up, cfg);
        st.early_head = co_await out.keeper->stop();
    }
    co_await relay(ex, up, p, st, out, cfg, extra);
    if (st.early_head) out.keeper->ended();  // whole, or its connection closes
    co_return attempt::relayed;
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

// A failover send: counted on its backend like an unpinned request while it runs.
class unpinned_lease {
public:
    unpinned_lease(routing::registry& reg, int backend, bool counted)
        : reg_(reg), backend_(counted ? backend : -1) {
        if (backend_ >= 0) reg_.begin_unpinned(backend_);
    }
    ~unpinned_lease() {
        if (backend_ >= 0) reg_.end_unpinned(backend_);
    }
    unpinned_lease(const unpinned_lease&) = delete;
    unpinned_lease& operator=(const unpinned_lease&) = delete;

private:
    routing::registry& reg_;
    int backend_;
};

// How long a request waits for the monitor to check backends (at start-up, or after a sign of
// a restart) before it is sent on what warmslot believes then.
constexpr auto check_wait = std::chrono::seconds(10);
// How often a client that asked for prompt progress hears of warmslot's priming.
constexpr auto progress_interval = std::chrono::milliseconds(1000);

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

awaitable<void> pipeline::forward(http_server::exchange& ex, outcome& out,
                                  const nlohmann::json* body) {
    const auto& cfg = *out.cfg;
    const auto shape = out.cls.ep.shape;
    const bool fan_out = fans_out(body);
    prompt_view view = cfg.routing.enabled && !fan_out ? view_of(shape, body) : prompt_view{};
    if (view.fp) {
        view.fp->session = api::session_hint(body, session_header(ex.request));
        view.fp->floating = !takes_id_slot(shape);
    }
    const auto& fp = view.fp;
    // Only supervised backends are started on demand: no coroutine call for the others.
    const bool any_supervised = std::any_of(cfg.backends.begin(), cfg.backends.end(),
                                            [](const config::backend& b) { return b.supervised(); });
    forward_state st;
    admission admitted;  // held to the end of the request
    if (starter_ && any_supervised) {
        // The client is watched while it waits for a backend to start: one that leaves gives
        // up its wait (and its place in a swap group's queue) at once.
        const watch_list::entry watched(*watches_[ex.worker], *ex.client, st);
        admitted = co_await starter_->wake(cfg, out.cls.model,
                                           out.caller ? out.caller->tenant : std::string(),
                                           [&st] { return st.client_gone; });
    }
    if (st.client_gone) {
        out.client_gone = true;
        ex.keep_alive = false;
        co_return;
    }
    if (!admitted.error.empty()) {
        co_await fail_starting(ex, out, admitted);
        co_return;
    }
    // After the wake: a backend it started may be the one that makes the backends serve more
    // than one model file (its model is read once it is healthy).
    const std::string model = by_model(cfg, reg_) ? out.cls.model : std::string();
    const std::uint64_t bytes = fp ? fp->total_bytes : ex.request.body().size();
    // Backends the registry added by a reload after this request took its config are not
    // candidates: the request's backend list is the one it indexes.
    const std::size_t known = cfg.backends.size();
    const bool takes_slot = may_take_slot(out.cls, std::string_view(ex.request.target()));
    const auto plan_now = [&](bool allow_wait) {
        return reg_.reserve(fp ? &*fp : nullptr, model, bytes, clock::now(), allow_wait, known,
                            takes_slot, out.caller ? out.caller->tenant : std::string(),
                            cfg.cache.isolated());
    };
    // A backend that may have fallen asleep since its last check (llama-server
    // --sleep-idle-seconds empties its slots) is checked first: the request is then planned on
    // what its slots hold (monitor/monitor_sleep.cpp).
    for (std::size_t i = 0; i < known; ++i) {
        const int idx = static_cast<int>(i);
        if (reg_.drowsy(idx)) co_await await_checks(cfg, idx, st, out, "sleep check");
    }
    // A router's model that is not loaded is loaded first (another one saved and unloaded
    // when the router has no room), and read, so the request is planned on its slots.
    for (std::size_t i = 0; i < known && !out.cls.model.empty(); ++i) {
        const auto& m = cfg.backends[i];
        if (m.router.empty() || m.retired || !reg_.asleep(static_cast<int>(i))) continue;
        if (std::find(m.models.begin(), m.models.end(), out.cls.model) == m.models.end()) continue;
        const watch_list::entry watched(*watches_[ex.worker], *ex.client, st);
        co_await load_router_model(cfg, static_cast<int>(i), *pools_[ex.worker], st, out);
    }
    if (cfg.routing.enabled && fp) co_await settle_floating(cfg, *pools_[ex.worker], st);
    // Ends however this coroutine ends: an exception or a destroyed coroutine cancels it.
    routing::reservation t(reg_, plan_now(true));
    if (t->p.backend < 0 && !t->p.unknown_model) {
        // No backend is ready: warmslot is starting, or each one is down or being checked.
        // The monitor looks now; the request is planned on what it then knows.
        co_await await_checks(cfg, -1, st, out, "readiness");
        t = routing::reservation(reg_, plan_now(true));
    }
    if (t->p.backend < 0 && t->p.unknown_model) {
        std::string message = "unknown model \"" + model + "\"; GET /v1/models lists them";
        co_await fail(ex, out, api::error_kind::not_found, std::move(message));
        co_return;
    }
    std::int64_t waited_ms = 0;
    auto run = [&]() -> awaitable<void> {
        for (int round = 0; !st.client_gone; ++round) {
            if (t->p.why == routing::route::wait_hit) {
                const auto start = clock::now();
                if (!co_await wait_for_slot(cfg, *t, st)) {
                    t.release();  // never took the slot: nothing is known of it but the wait
                    if (st.client_gone) co_return;
                    t = routing::reservation(reg_, plan_now(false));
                }
                waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
            }
            // No idle slot means llama-server's queue, which hands the request the first slot to
            // free up, whoever's prompt it holds, before anything of that prompt is saved. It
            // waits here instead, and is planned on the slot that frees up: its own prefix, or
            // one restored from disk. Under tenant isolation always; else a request worth a slot
            // (not a one-off), until routing.max_wait, and then into llama-server's queue.
            const bool isolated = cfg.cache.isolated();
            if (cfg.routing.enabled && takes_slot && fp && t->p.backend >= 0 && !t->p.slot &&
                (isolated || t->p.why == routing::route::miss_slot_busy)) {
                const auto start = clock::now();
                bool got = true;
                if (isolated) {
                    got = co_await wait_for_idle(cfg, t, [&] { return plan_now(false); }, st);
                } else {
                    co_await hold_for_slot(cfg, *pools_[ex.worker], t, [&] { return plan_now(false); },
                                          st);
                }
                if (st.client_gone) co_return;
                waited_ms += std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
                if (!got) {
                    st.isolation_wait_failed = true;
                    break;
                }
            }
            const int suspect = co_await send(ex, out, st, t, view, body, waited_ms, round == 0,
                                              takes_slot);
            if (suspect == sent_done) co_return;
            if (suspect < 0 || st.client_gone) break;
            // The planned backend may have restarted: what its slots hold is checked before the
            // request is planned again (and its prefix restored from disk). Nothing reached the
            // slot: its belief stays for the check to confirm or correct. That holds for a
            // floating request too (llama-server never got it): forgetting here would plan it
            // anew as a miss and prepare another slot over the one that holds its conversation.
            if (t->p.slot) {
                t.release();
            } else {
                t.cancel();
            }
            co_await await_checks(cfg, suspect, st, out, "restart check");
            if (st.client_gone) co_return;  // planned for nobody: nothing to end
            t = routing::reservation(reg_, plan_now(true));
        }
        t.end();  // forgets what the slot holds only when the request may have reached it
    };
    {
        const watch_list::entry watched(*watches_[ex.worker], *ex.client, st);
        co_await run();
    }
    out.client_gone = st.client_gone && !st.answered;
    if (st.client_gone) {
        ex.keep_alive = false;
        co_return;
    }
    if (!st.headers_sent && st.isolation_wait_failed) {
        co_await fail(ex, out, api::error_kind::backend_unavailable,
                      "no slot came free within routing.max_wait; tenant isolation keeps "
                      "requests out of llama-server's queue");
        co_return;
    }
    if (!st.headers_sent) {
        // Built before the co_await: g++ 12 mishandles temporaries of a conditional expression
        // inside a co_await (they are destroyed twice).
        const bool timeout = st.last_error == beast::error::timeout;
        const auto kind_of_error = timeout ? api::error_kind::upstream_timeout
                                           : api::error_kind::backend_unreachable;
        std::string message = "no backend could be reached: " + st.last_error.message();
        if (!st.last_error) message = "no backend could be reached";  // none was tried
        if (timeout) message = "the backend did not answer in time";
        co_await fail(ex, out, kind_of_error, std::move(message));
    }
}

// Prompt progress events while the disk tier works on `slot` for a request of `total` tokens:
// the tokens llama-server's /slots shows in the slot while warmslot primes it (the monitor's
// last look), never falling; "" (a keep-alive instead) before the priming has begun.
std::function<std::string()> pipeline::progress_source(int backend, int slot, std::size_t total,
                                                        api::api_shape shape, std::string id,
                                                        std::string model) {
    struct seen {
        std::uint64_t processed = 0;
        bool begun = false;
        std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    };
    auto last = std::make_shared<seen>();
    return [this, backend, slot, total, shape, id = "chatcmpl-" + std::move(id),
            model = std::move(model), last]() -> std::string {
        const auto [work, done] = reg_.work_of(backend, slot);
        if (work == routing::slot_work::priming) {
            last->begun = true;
            last->processed = std::max(last->processed, done);
        }
        if (!last->begun) return {};
        api::prompt_progress p;
        p.total = total;
        p.processed = std::min<std::uint64_t>(last->processed, total);
        p.time_ms = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   std::chrono::steady_clock::now() - last->start)
                                                   .count());
        const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
        return api::prompt_progress_event(shape, p, id, model, created);
    };
}

namespace {
bool streamed(const nlohmann::json* body) {
    if (body == nullptr || !body->is_object()) return false;
    const auto it = body->find("stream");
    return it != body->end() && it->is_boolean() && it->get<bool>();
}
}  // namespace

// After the answer of a request whose prefix's file is due: the save, while the slot is still
// reserved and marked as being prepared (a request llama-server places itself waits for it),
// then the reservation completes with the answer's stats. The file is saved only when
// llama-server's count of the prompt is warmslot's (the prefix is then the start of what the
// slot holds).
awaitable<void> pipeline::save_after_answer(upstream::pool& pool, routing::reservation& r,
                                            outcome& out, const routing::fingerprint* fp,
                                            const api::prompt_stats& stats,
                                            const cache::token_chain& chain) {
    auto& t = *r;
    const auto prompt = static_cast<std::uint64_t>(std::max(0L, stats.cached) +
                                                   std::max(0L, stats.processed));
    if (prompt == chain.size()) {
        r.preparing(true);
        out.disk = co_await disk_->save_after_answer(
            pool, t, out.disk, prompt, static_cast<std::uint64_t>(std::max(0L, stats.predicted)));
        r.preparing(false);
    } else {
        disk_->forget_due(t.p.backend, *t.p.slot);
        out.disk.save_due = 0;  // the access line says only what was done
    }
    r.complete(fp, stats, clock::now());
}

// The planned backend first (pinned if planned so), then the others unpinned. Returns
// sent_done when an answer was relayed; the planned backend's index when it showed a sign of
// a restart (`may_recheck`: a dead pooled connection under a request planned on a slot, pinned
// or floating, or a refused connect) and nothing was sent; sent_failed when no backend could be
// reached. A dead connection met by the calls for the request's tokens counts as such a sign;
// one the disk tier's later calls met is checked in place.
awaitable<int> pipeline::send(http_server::exchange& ex, outcome& out, forward_state& st,
                              routing::reservation& r, const prompt_view& view,
                              const nlohmann::json* body, std::int64_t waited_ms, bool may_recheck,
                              bool takes_slot) {
    auto& t = *r;
    const auto& fp = view.fp;
    const auto& cfg = *out.cfg;
    const auto shape = out.cls.ep.shape;
    auto& pool = *pools_[ex.worker];
    // A per-request adapter changes what the KV holds for the same tokens: such a request is
    // neither restored from nor saved to files of the backend's own identity.
    const bool lora = body != nullptr && body->is_object() && body->contains("lora");
    // A failover stays among the backends that serve the request's model: another model's
    // answer is no answer (a swap group's member stopped under a request must not send it to
    // a backend outside the group).
    const std::string model = by_model(cfg, reg_) ? out.cls.model : std::string();
    std::optional<std::vector<routing::backend_view>> views;
    std::optional<api::prompt_stats> answered;  // the planned try's, when a file is due
    for (std::size_t k = 0; k < cfg.backends.size() && !st.client_gone; ++k) {
        const auto chosen = t.p.backend < 0 ? 0 : static_cast<std::size_t>(t.p.backend);
        const std::size_t i = k == 0 ? chosen : (k <= chosen ? k - 1 : k);
        const auto& b = cfg.backends[i];
        const bool planned = t.p.backend >= 0 && i == chosen;
        if (!planned && b.retired) continue;  // removed by a reload: draining
        if (reg_.foreign(static_cast<int>(i))) continue;  // not the process warmslot started
        if (!planned && !model.empty()) {
            if (!views) views = reg_.snapshot();
            if (i < views->size() && !routing::serves((*views)[i], model)) continue;
        }
        if (starter_ && b.supervised()) starter_->used(static_cast<int>(i));  // idle_stop
        const std::optional<int> slot = planned ? t.p.slot : std::nullopt;
        // What the disk tier did is this backend's, this round's: an earlier try's restore must
        // not reach this answer's headers or the restore judge (its priming was still done).
        const auto primed = out.disk.primed;
        auto unloaded = std::move(out.disk.unloaded);  // before the request, kept
        out.disk = tier::disk_action{};
        out.disk.primed = primed;
        out.disk.unloaded = std::move(unloaded);
        const auto stale_before = pool.stale_count(b.host, b.port);
        const bool pin = slot && takes_id_slot(shape);
        header_list extra = {
            {"X-Warmslot-Backend", b.name},
            {"X-Warmslot-Route", planned ? route_header(t.p, waited_ms) : "failover"},
            {"X-Warmslot-Slot", pin ? std::to_string(*slot) : "-"}};
        // A floating request: the slot llama-server's own choice is expected to take, where the
        // disk tier prepared the prefix.
        if (slot && !pin) extra.emplace_back("X-Warmslot-Expected-Slot", std::to_string(*slot));
        if (!out.rewrites.empty()) extra.emplace_back("X-Warmslot-Rewrites", out.rewrites);
        // What a stream's head says if it goes out while the slot is prepared.
        if (out.keeper) out.keeper->set_headers(extra);
        const bool tiered = slot && disk_ && fp && view.chat() && !lora && worth_preparing(*fp);
        // The request's tokens first: those calls are the first to meet a backend that
        // restarted since the plan (closed pooled connections), and then what the plan believed
        // of the slot is checked and the request planned again before anything is done to it.
        // A slot reserved for a pinned request stays idle on the server until the request starts
        // there: one sent without id_slot meanwhile could be placed on it, and this one would then
        // name a busy slot (llama-server was seen to spin on that without end). So the slot is
        // marked from now until llama-server has started this request, or this try is over.
        if (planned && pin) r.preparing(true);
        std::optional<cache::token_chain> chain;
        if (tiered) {
            chain = co_await disk_->request_tokens(pool, static_cast<int>(i), *fp, *view.chat(),
                                                   t.tenant);
        }
        if (slot && may_recheck && pool.stale_count(b.host, b.port) != stale_before) {
            r.preparing(false);
            co_return static_cast<int>(i);
        }
        if (slot && !lora && cfg.routing.enabled) {
            co_await clear_adapter_kv(pool, cfg, static_cast<int>(i), t, !takes_id_slot(shape));
        }
        // Tenant isolation: nothing another tenant's request left in a slot may serve this one.
        // A slot that cannot be emptied is not used: the next backend is tried as after a failure.
        if (cfg.cache.isolated() && cfg.routing.enabled && takes_slot &&
            !co_await isolate(pool, static_cast<int>(i), t, slot, pin, fp ? &*fp : nullptr, out)) {
            if (planned) r.preparing(false);
            continue;
        }
        if (tiered && chain) {
            r.preparing(true);
            // A client that asked for prompt progress sees warmslot's priming as the start of
            // its own prompt: one rising count of one total, continued by llama-server's events.
            const bool progress = out.keeper && body && api::wants_prompt_progress(shape, *body);
            if (progress) {
                out.keeper->set_progress(
                    progress_source(static_cast<int>(i), *slot, chain->size(), shape, ex.id,
                                    out.cls.model),
                    progress_interval);
            }
            auto made_room = std::move(out.disk.unloaded);
            out.disk = co_await disk_->prepare(pool, t, *fp, *view.chat(), *chain,
                                               out.caller ? out.caller->tenant : std::string(),
                                               cfg.cache.save_after_answer && streamed(body));
            out.disk.unloaded = std::move(made_room);
            if (progress) out.keeper->set_progress(nullptr, progress_interval);
            // A floating request expected on another slot, which shares more of its prompt.
            if (!pin && t.p.slot && t.p.slot != slot) {
                for (auto& [name, value] : extra) {
                    if (name == "X-Warmslot-Expected-Slot") value = std::to_string(*t.p.slot);
                }
                if (out.keeper) out.keeper->set_headers(extra);
            }
            // Nothing done to the slot: it is not being prepared (a floating request waiting
            // for its turn below must not be taken for one preparing its prefix).
            if (out.disk.what == tier::disk_action::kind::none && out.disk.primed == 0 && !pin)
                r.preparing(false);
        }
        // The disk tier's calls met a closed pooled connection and went on over a new one: the
        // backend may have restarted. What they did to this slot was done on the backend as it
        // is now, so the request goes on; the check corrects the other beliefs first.
        if (slot && may_recheck && pool.stale_count(b.host, b.port) != stale_before) {
            co_await await_checks(cfg, static_cast<int>(i), st, out, "restart check");
        }
        if (slot && !pin) reg_.mark_floating(t);
        if (slot && !pin && fp) {
            co_await wait_turn(cfg, pool, b, t, *fp, st);
            // After the wait: what the other slots hold now is what llama-server compares.
            if (disk_ && view.chat() && !lora && worth_preparing(*fp))
                co_await disk_->clear_rivals(
                    pool, t, *fp, chain ? &*chain : nullptr,
                    out.disk.what == tier::disk_action::kind::restored ||
                        out.disk.what == tier::disk_action::kind::snapshotted);
        }
        // llama-server places this one itself: not on a slot a request is preparing. (A
        // floating request has a slot of its own, prepared for it and predicted to be chosen:
        // it waited for its turn above instead.)
        if (!slot && takes_slot) co_await wait_for_preparations(cfg, static_cast<int>(i), st);
        if (const auto d = describe(out.disk); !d.empty()) extra.emplace_back("X-Warmslot-Disk", d);
        if (out.disk.primed > 0)
            extra.emplace_back("X-Warmslot-Primed-Tokens", std::to_string(out.disk.primed));
        out.backend = b.name;
        out.route = extra[1].second;
        out.slot = pin ? slot : std::nullopt;
        const unpinned_lease unpinned(reg_, static_cast<int>(i), !planned && takes_slot);
        if (lora && takes_slot) reg_.mark_adapter(static_cast<int>(i), pin ? slot : std::nullopt);
        // Status shows the request's prefill on its slot against the prompt's tokens, when known.
        std::optional<routing::work_mark> running;
        if (pin && chain)
            running.emplace(reg_, static_cast<int>(i), *slot, routing::slot_work::running, chain->size());
        bool connect_failed = false;
        for (int tries = 0; tries < 2 && !st.client_gone; ++tries) {
            // The retry after a stale pooled connection goes on a new one.
            auto [ec, conn] = co_await pool.acquire(b.host, b.port, cfg.timeouts.connect, tries > 0);
            if (ec) {
                st.last_error = ec;
                connect_failed = true;
                break;
            }
            if (st.client_gone) break;  // left while we connected: send nothing
            st.current = conn.get();
            st.completed = false;
            // A file due after the answer is saved before the slot is given back: the
            // reservation completes after the save.
            answered.reset();
            st.on_complete = [&, planned](const std::optional<api::prompt_stats>& stats) {
                if (!planned) return;
                if (disk_) disk_->check(t.p.backend, out.disk, stats);
                if (out.disk.save_due > 0 && stats) {
                    answered = stats;
                    return;
                }
                r.complete(fp ? &*fp : nullptr, stats, clock::now());
            };
            outgoing_body prepared =
                cfg.routing.enabled
                    ? prepared_body(ex.request.body(), body, pin ? slot : std::nullopt, b)
                    : prepared_body(ex.request.body(), nullptr, std::nullopt, b);
            st.on_started = nullptr;
            if (planned) {
                r.sent();
                reg_.sending(t, clock::now());
                // A slot the disk tier worked on, or one this request names, stays marked until
                // llama-server has started the request there: a request placed by llama-server
                // could take it first.
                const bool worked = out.disk.what != tier::disk_action::kind::none || out.disk.primed > 0;
                r.preparing(worked || pin);
                st.on_started = [&r] { r.preparing(false); };
            }
            const auto result = co_await try_backend(ex, *conn, st, out, cfg, b,
                                                     std::move(prepared), extra);
            st.current = nullptr;
            if (result == attempt::relayed) {
                if (st.upstream_reusable && !st.client_gone) pool.release(std::move(conn));
                if (!planned) r.cancel();
                st.complete(out.stats);  // if the answer was cut short: recorded now
                if (planned && answered) {
                    co_await save_after_answer(pool, r, out, fp ? &*fp : nullptr, *answered, *chain);
                } else if (planned && out.disk.save_due > 0) {
                    disk_->forget_due(t.p.backend, *t.p.slot);  // no answer to save after
                    out.disk.save_due = 0;
                }
                co_return sent_done;
            }
            if (result == attempt::backend_failed) break;
            // A dead pooled connection: the backend closed it, maybe because it restarted. A
            // floating request (Messages) was planned on the same beliefs as a pinned one.
            if (planned && slot && may_recheck) {
                r.preparing(false);
                co_return static_cast<int>(i);
            }
        }
        if (planned && out.disk.save_due > 0) disk_->forget_due(t.p.backend, *t.p.slot);
        if (planned) r.preparing(false);  // nothing more is done on the slot by this request
        if (planned && !st.client_gone) {
            if (connect_failed && may_recheck) co_return static_cast<int>(i);
            reg_.set_healthy(static_cast<int>(i), false);
        }
    }
    co_return sent_failed;
}

}  // namespace warmslot::service
