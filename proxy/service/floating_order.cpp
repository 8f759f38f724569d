// The order in which requests llama-server places itself (Anthropic Messages: it drops their
// id_slot) are sent when several are prepared at once on one backend. llama-server gives such a
// request the idle slot sharing the most of its prompt, ties to the lower id. When two requests
// share a document and each had its own slot prepared with it, the one on the higher slot sent
// while the lower slot is still idle (prepared, its request not running yet) would run on the
// lower slot, and the other request then on the higher one: both computed, but each on the
// slot the other was prepared on, and every belief about them wrong. And a request whose slot
// could not be prepared (another request holds the file's key) would run on any idle slot
// holding its prefix. So a request waits until the requests of the slots that would take it
// (routing::registry::ahead) are running there. A prepared slot waits only for lower ones, an
// unprepared one for every slot holding its prefix; two requests with different prefixes could
// then wait for each other (one's slot holds the other's prefix), so among two requests waiting
// here for each other only the lower slot counts as ahead: no cycle. A higher request that waits,
// but not for this one, stays ahead.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "routing/observations.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "service/wakeup.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot::service {

namespace {
using routing::clock;
constexpr std::chrono::milliseconds slots_timeout{10'000};  // GET /slots
constexpr std::chrono::milliseconds poll_pause{25};         // between two reads of /slots
constexpr int max_polls = 200;                              // 5 s of reads once all are sent
constexpr std::chrono::milliseconds settle_timeout{2'000};  // GET /slots before a plan
// A floating request sent this recently may not be on its slot yet: read again, a few times.
constexpr std::chrono::milliseconds settle_window{500};
constexpr int max_settle_reads = 8;
}  // namespace

awaitable<void> pipeline::settle_floating(const config::config& cfg, upstream::pool& pool,
                                          forward_state& st) {
    for (std::size_t i = 0; i < cfg.backends.size() && !st.client_gone; ++i) {
        const int backend = static_cast<int>(i);
        clock::time_point newest{};
        for (int reads = 0; reads < max_settle_reads && !st.client_gone; ++reads) {
            if (reg_.unsettled_floating(backend, &newest) == 0) break;
            const auto r = co_await upstream::call(pool, cfg.backends[i], http::verb::get, "/slots",
                                                   "", settle_timeout);
            const auto seen = routing::read_slots(
                r.status == 200 ? nlohmann::json::parse(r.body, nullptr, false) : nlohmann::json());
            if (!seen || reg_.settle_floating(backend, *seen, clock::now())) break;
            if (clock::now() - newest > settle_window) break;  // queued, or on another slot
            co_await wait_until(
                *wakeups_, [] { return false; }, clock::now() + poll_pause,
                [&st] { return st.client_gone; });
        }
    }
}

awaitable<void> pipeline::wait_turn(const config::config& cfg, upstream::pool& pool,
                                    const config::backend& b, const routing::ticket& t,
                                    const routing::fingerprint& fp, forward_state& st) {
    if (t.p.backend < 0 || !t.p.slot) co_return;
    const int backend = t.p.backend;
    const int slot = *t.p.slot;
    // At most as long as a wait for a busy slot: past it, the request goes as it is.
    const auto deadline = clock::now() + cfg.routing.max_wait;
    // Marked while it waits (registry::set_waiting_turn), however the wait ends.
    struct waiting_mark {
        routing::registry& reg;
        const routing::ticket& t;
        waiting_mark(routing::registry& r, const routing::ticket& tk) : reg(r), t(tk) {
            reg.set_waiting_turn(t, true);
        }
        ~waiting_mark() { reg.set_waiting_turn(t, false); }
        waiting_mark(const waiting_mark&) = delete;
        waiting_mark& operator=(const waiting_mark&) = delete;
    } const mark(reg_, t);
    const auto gone = [&st] { return st.client_gone; };
    for (int polls = 0; polls < max_polls && !st.client_gone;) {
        const auto ahead = reg_.ahead(backend, slot, fp);
        if (ahead.empty()) co_return;
        if (ahead.unsent) {  // prepared, not sent yet: woken when it is, or its ticket ends
            const bool sent = co_await wait_until(
                *wakeups_, [&] { return !reg_.ahead(backend, slot, fp).unsent; }, deadline, gone);
            if (!sent) co_return;
            continue;
        }
        // Sent: running there once GET /slots shows the slot processing.
        const auto r =
            co_await upstream::call(pool, b, http::verb::get, "/slots", "", slots_timeout);
        const auto seen = routing::read_slots(
            r.status == 200 ? nlohmann::json::parse(r.body, nullptr, false) : nlohmann::json());
        if (!seen) co_return;  // cannot tell: go
        const bool running = std::all_of(ahead.sent.begin(), ahead.sent.end(), [&](const auto& a) {
            return std::any_of(seen->begin(), seen->end(), [&](const routing::observed_slot& o) {
                return o.id == a.first && o.processing;
            });
        });
        if (running) co_return;
        ++polls;
        co_await wait_until(
            *wakeups_, [] { return false; }, std::min(deadline, clock::now() + poll_pause), gone);
    }
}

}  // namespace warmslot::service
