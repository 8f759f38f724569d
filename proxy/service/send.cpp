// Sending one planned request: its slot prepared (tokens, isolation, the disk tier's restore or
// priming, its turn among floating requests), then the request sent and its answer relayed.
// The planned backend first, pinned if planned so, then the others unpinned: a failover
// happens only before the first byte reached the client.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/endpoints.hpp"
#include "api/forward_headers.hpp"
#include "api/keepalive.hpp"
#include "service/forwarding.hpp"
#include "service/keepalive.hpp"
#include "service/outgoing.hpp"
#include "service/wakeup.hpp"
#include "upstream/llama_client.hpp"
#include "upstream/router_call.hpp"

namespace warmslot::service {
namespace {

using routing::clock;

enum class attempt { relayed, stale_connection, backend_failed };

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
    const std::array<net::const_buffer, 4> request{
        net::buffer(head), body.owned.empty() ? net::buffer(body.before) : net::buffer(body.owned),
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

// How often a client that asked for prompt progress hears of warmslot's priming.
constexpr auto progress_interval = std::chrono::milliseconds(1000);

bool streamed(const nlohmann::json* body) {
    if (body == nullptr || !body->is_object()) return false;
    const auto it = body->find("stream");
    return it != body->end() && it->is_boolean() && it->get<bool>();
}

// Whether `backend` may take the request: the planned one always; for a failover, one that is
// not draining, is the process warmslot started, and serves the request's model (another
// model's answer is no answer: a swap group's member stopped under a request must not send it
// to a backend outside the group).
bool candidate(const routing::registry& reg, const forwarding& f, const backend_ref& backend,
               bool planned, std::optional<std::vector<routing::backend_view>>& views) {
    if (!planned && backend->retired) return false;  // removed by a reload: draining
    if (reg.foreign(backend.id())) return false;     // not the process warmslot started
    if (!planned && !f.model.empty()) {
        if (!views) views = reg.snapshot();
        if (backend.index() < views->size() && !routing::serves((*views)[backend.index()], f.model))
            return false;
    }
    return true;
}

// The try's state before anything is done: what the disk tier did is this backend's, this
// round's (an earlier try's restore must not reach this answer's headers or the restore judge;
// its priming was still done), and the headers the answer will carry.
backend_try start_try(forwarding& f, std::size_t index, bool planned, bool disk) {
    backend_try bt(f.cfg, index, planned);
    auto& out = f.out;
    const auto& t = *f.r;
    const auto& fp = f.view.fp;
    bt.slot = planned ? t.p.slot : std::nullopt;
    // A per-request adapter changes what the KV holds for the same tokens: such a request is
    // neither restored from nor saved to files of the backend's own identity.
    bt.lora = f.body != nullptr && f.body->is_object() && f.body->contains("lora");
    bt.pin = bt.slot && takes_id_slot(out.cls.ep.shape);
    bt.tiered = bt.slot && disk && fp && f.view.chat() && !bt.lora && worth_preparing(*fp);
    const auto primed = out.disk.primed;
    auto unloaded = std::move(out.disk.unloaded);  // before the request, kept
    out.disk = tier::disk_action{};
    out.disk.primed = primed;
    out.disk.unloaded = std::move(unloaded);
    bt.stale_before = f.pool.stale_count(bt.ref->host, bt.ref->port);
    bt.extra = {{"X-Warmslot-Backend", bt.ref->name},
                {"X-Warmslot-Route", planned ? route_header(t.p, f.waited_ms) : "failover"},
                {"X-Warmslot-Slot", bt.pin ? std::to_string(*bt.slot) : "-"}};
    // A floating request: the slot llama-server's own choice is expected to take, where the
    // disk tier prepared the prefix.
    if (bt.slot && !bt.pin)
        bt.extra.emplace_back("X-Warmslot-Expected-Slot", std::to_string(*bt.slot));
    if (!out.rewrites.empty()) bt.extra.emplace_back("X-Warmslot-Rewrites", out.rewrites);
    // What a stream's head says if it goes out while the slot is prepared.
    if (out.keeper) out.keeper->set_headers(bt.extra);
    return bt;
}

send_result result_of(send_result::end what, std::optional<backend_ref> b) {
    return send_result{what, b};
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
    const auto prompt =
        static_cast<std::uint64_t>(std::max(0L, stats.cached) + std::max(0L, stats.processed));
    if (prompt == chain.size()) {
        r.preparing(true);
        out.disk = co_await disk_->save_after_answer(
            {pool, out.cfg}, t, out.disk, prompt,
            static_cast<std::uint64_t>(std::max(0L, stats.predicted)));
        r.preparing(false);
    } else {
        disk_->forget_due(t.p.backend, *t.p.slot);
        out.disk.save_due = 0;  // the access line says only what was done
    }
    r.complete(fp, stats, clock::now());
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
        p.time_ms =
            static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - last->start)
                                           .count());
        const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
        return api::prompt_progress_event(shape, p, id, model, created);
    };
}

// The planned backend first (pinned if planned so), then the others unpinned. `recheck` with
// the planned backend when it showed a sign of a restart (`may_recheck`: a dead pooled
// connection under a request planned on a slot, pinned or floating, or a refused connect) and
// nothing was sent. A dead connection met by the calls for the request's tokens counts as such
// a sign; one the disk tier's later calls met is checked in place.
awaitable<send_result> pipeline::send(forwarding& f, bool may_recheck) {
    const auto& t = *f.r;
    const auto& cfg = f.cfg;
    std::optional<std::vector<routing::backend_view>> views;
    for (std::size_t k = 0; k < cfg.backends.size() && !f.st.client_gone; ++k) {
        const auto chosen = t.p.backend < 0 ? 0 : static_cast<std::size_t>(t.p.backend);
        const std::size_t i = k == 0 ? chosen : (k <= chosen ? k - 1 : k);
        const bool planned = t.p.backend >= 0 && i == chosen;
        if (!candidate(reg_, f, backend_ref(cfg, i), planned, views)) continue;
        if (starter_ && cfg.backends[i].supervised())
            starter_->used(static_cast<int>(i));  // idle_stop
        backend_try bt = start_try(f, i, planned, disk_ != nullptr);
        const auto prepared = co_await prepare_slot(f, bt, may_recheck);
        if (prepared == try_step::recheck) co_return result_of(send_result::end::recheck, bt.ref);
        if (prepared == try_step::skip) continue;
        const auto sent = co_await deliver(f, bt, may_recheck);
        if (sent == try_step::done) co_return result_of(send_result::end::answered, bt.ref);
        if (sent == try_step::recheck) co_return result_of(send_result::end::recheck, bt.ref);
    }
    co_return result_of(send_result::end::failed, std::nullopt);
}

// Everything done to the slot before the request is sent. `skip`: the slot could not be made
// fit for it (tenant isolation), the next backend is tried as after a failure.
awaitable<try_step> pipeline::prepare_slot(forwarding& f, backend_try& bt, bool may_recheck) {
    auto& r = f.r;
    auto& t = *r;
    auto& out = f.out;
    const auto& cfg = f.cfg;
    const auto& fp = f.view.fp;
    const auto& b = *bt.ref;
    const int i = bt.ref.id();
    // The request's tokens first: those calls are the first to meet a backend that restarted
    // since the plan (closed pooled connections), and then what the plan believed of the slot is
    // checked and the request planned again before anything is done to it.
    // A slot reserved for a pinned request stays idle on the server until the request starts
    // there: one sent without id_slot meanwhile could be placed on it, and this one would then
    // name a busy slot (llama-server was seen to spin on that without end). So the slot is
    // marked from now until llama-server has started this request, or this try is over.
    if (bt.planned && bt.pin) r.preparing(true);
    if (bt.tiered) {
        bt.chain = co_await disk_->request_tokens(f.scope(), i, *fp, *f.view.chat(), t.tenant);
    }
    if (bt.slot && may_recheck && f.pool.stale_count(b.host, b.port) != bt.stale_before) {
        r.preparing(false);
        co_return try_step::recheck;
    }
    if (bt.slot && !bt.lora && cfg.routing.enabled) {
        co_await clear_adapter_kv(f.pool, cfg, i, t, !takes_id_slot(out.cls.ep.shape));
    }
    // Tenant isolation: nothing another tenant's request left in a slot may serve this one.
    if (cfg.cache.isolated() && cfg.routing.enabled && f.takes_slot &&
        !co_await isolate(f.pool, i, t, bt.slot, bt.pin, fp ? &*fp : nullptr, out)) {
        if (bt.planned) r.preparing(false);
        co_return try_step::skip;
    }
    if (bt.tiered && bt.chain) co_await prepare_prefix(f, bt);
    // The disk tier's calls met a closed pooled connection and went on over a new one: the
    // backend may have restarted. What they did to this slot was done on the backend as it
    // is now, so the request goes on; the check corrects the other beliefs first.
    if (bt.slot && may_recheck && f.pool.stale_count(b.host, b.port) != bt.stale_before) {
        co_await await_checks(cfg, i, f.st, out, "restart check");
    }
    if (bt.slot && !bt.pin) reg_.mark_floating(t);
    if (bt.slot && !bt.pin && fp) {
        co_await wait_turn(cfg, f.pool, b, t, *fp, f.st);
        // After the wait: what the other slots hold now is what llama-server compares.
        if (disk_ && f.view.chat() && !bt.lora && worth_preparing(*fp))
            co_await disk_->clear_rivals(f.scope(), t, *fp, bt.chain ? &*bt.chain : nullptr,
                                         out.disk.what == tier::disk_action::kind::restored ||
                                             out.disk.what == tier::disk_action::kind::snapshotted);
    }
    // llama-server places this one itself: not on a slot a request is preparing. (A floating
    // request has a slot of its own, prepared for it and predicted to be chosen: it waited for
    // its turn above instead.)
    if (!bt.slot && f.takes_slot) co_await wait_for_preparations(cfg, i, f.st);
    if (const auto d = describe(out.disk); !d.empty()) bt.extra.emplace_back("X-Warmslot-Disk", d);
    if (out.disk.primed > 0)
        bt.extra.emplace_back("X-Warmslot-Primed-Tokens", std::to_string(out.disk.primed));
    out.backend = b.name;
    out.route = bt.extra[1].second;
    out.slot = bt.pin ? bt.slot : std::nullopt;
    co_return try_step::go;
}

// The disk tier's work on the planned slot: the prefix restored, primed or kept.
awaitable<void> pipeline::prepare_prefix(forwarding& f, backend_try& bt) {
    auto& r = f.r;
    auto& t = *r;
    auto& out = f.out;
    const auto shape = out.cls.ep.shape;
    r.preparing(true);
    // A client that asked for prompt progress sees warmslot's priming as the start of its own
    // prompt: one rising count of one total, continued by llama-server's events.
    const bool progress = out.keeper && f.body && api::wants_prompt_progress(shape, *f.body);
    if (progress) {
        out.keeper->set_progress(
            progress_source(bt.ref.id(), *bt.slot, bt.chain->size(), shape, f.ex.id, out.cls.model),
            progress_interval);
    }
    auto made_room = std::move(out.disk.unloaded);
    out.disk = co_await disk_->prepare(f.scope(), t, *f.view.fp, *f.view.chat(), *bt.chain,
                                       out.caller ? out.caller->tenant : std::string(),
                                       f.cfg.cache.save_after_answer && streamed(f.body));
    out.disk.unloaded = std::move(made_room);
    if (progress) out.keeper->set_progress(nullptr, progress_interval);
    // A floating request expected on another slot, which shares more of its prompt.
    if (!bt.pin && t.p.slot && t.p.slot != bt.slot) {
        for (auto& [name, value] : bt.extra) {
            if (name == "X-Warmslot-Expected-Slot") value = std::to_string(*t.p.slot);
        }
        if (out.keeper) out.keeper->set_headers(bt.extra);
    }
    // Nothing done to the slot: it is not being prepared (a floating request waiting for its
    // turn must not be taken for one preparing its prefix).
    if (out.disk.what == tier::disk_action::kind::none && out.disk.primed == 0 && !bt.pin)
        r.preparing(false);
}

// The request sent to the backend and its answer relayed, over a pooled connection (again
// over a new one after a stale one). `done`: an answer was relayed; `recheck`: a sign of a
// restart before anything was sent; `failed`: the backend could not be reached.
awaitable<try_step> pipeline::deliver(forwarding& f, backend_try& bt, bool may_recheck) {
    auto& r = f.r;
    auto& t = *r;
    auto& st = f.st;
    auto& out = f.out;
    const auto& cfg = f.cfg;
    const auto& b = *bt.ref;
    const int i = bt.ref.id();
    const auto* fp = f.view.fp ? &*f.view.fp : nullptr;
    const bool planned = bt.planned;
    const unpinned_lease unpinned(reg_, i, !planned && f.takes_slot);
    if (bt.lora && f.takes_slot) reg_.mark_adapter(i, bt.pin ? bt.slot : std::nullopt);
    // Status shows the request's prefill on its slot against the prompt's tokens, when known.
    std::optional<routing::work_mark> running;
    if (bt.pin && bt.chain)
        running.emplace(reg_, i, *bt.slot, routing::slot_work::running, bt.chain->size());
    bool connect_failed = false;
    for (int tries = 0; tries < 2 && !st.client_gone; ++tries) {
        // The retry after a stale pooled connection goes on a new one.
        auto [ec, conn] = co_await f.pool.acquire(b.host, b.port, cfg.timeouts.connect, tries > 0);
        if (ec) {
            st.last_error = ec;
            connect_failed = true;
            break;
        }
        if (st.client_gone) break;  // left while we connected: send nothing
        st.current = conn.get();
        st.completed = false;
        // A file due after the answer is saved before the slot is given back: the reservation
        // completes after the save.
        bt.answered.reset();
        st.on_complete = [&, planned](const std::optional<api::prompt_stats>& stats) {
            if (!planned) return;
            if (disk_) disk_->check(t.p.backend, out.disk, stats);
            if (out.disk.save_due > 0 && stats) {
                bt.answered = stats;
                return;
            }
            r.complete(fp, stats, clock::now());
        };
        outgoing_body prepared =
            cfg.routing.enabled
                ? prepared_body(f.ex.request.body(), f.body, bt.pin ? bt.slot : std::nullopt, b)
                : prepared_body(f.ex.request.body(), nullptr, std::nullopt, b);
        st.on_started = nullptr;
        if (planned) {
            r.sent();
            reg_.sending(t, clock::now());
            // A slot the disk tier worked on, or one this request names, stays marked until
            // llama-server has started the request there: a request placed by llama-server could
            // take it first.
            const bool worked =
                out.disk.what != tier::disk_action::kind::none || out.disk.primed > 0;
            r.preparing(worked || bt.pin);
            st.on_started = [&r] { r.preparing(false); };
        }
        const auto result =
            co_await try_backend(f.ex, *conn, st, out, cfg, b, std::move(prepared), bt.extra);
        st.current = nullptr;
        if (result == attempt::relayed) {
            if (st.upstream_reusable && !st.client_gone) f.pool.release(std::move(conn));
            if (!planned) r.cancel();
            st.complete(out.stats);  // if the answer was cut short: recorded now
            if (planned && bt.answered) {
                co_await save_after_answer(f.pool, r, out, fp, *bt.answered, *bt.chain);
            } else if (planned && out.disk.save_due > 0) {
                disk_->forget_due(t.p.backend, *t.p.slot);  // no answer to save after
                out.disk.save_due = 0;
            }
            co_return try_step::done;
        }
        st.on_complete = nullptr;  // its captures end with this try
        if (result == attempt::backend_failed) break;
        // A dead pooled connection: the backend closed it, maybe because it restarted. A
        // floating request (Messages) was planned on the same beliefs as a pinned one.
        if (planned && bt.slot && may_recheck) {
            r.preparing(false);
            co_return try_step::recheck;
        }
    }
    if (planned && out.disk.save_due > 0) disk_->forget_due(t.p.backend, *t.p.slot);
    if (planned) r.preparing(false);  // nothing more is done on the slot by this request
    if (planned && !st.client_gone) {
        if (connect_failed && may_recheck) co_return try_step::recheck;
        reg_.set_healthy(i, false);
    }
    co_return try_step::failed;
}

}  // namespace warmslot::service
