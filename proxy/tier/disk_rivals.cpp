// Floating requests (Anthropic Messages: llama-server drops their id_slot) run where llama-server's
// own choice puts them. Once the planned slot holds the request's stable prefix, the idle slots
// that would still take the request from it (routing::floating_rivals) are erased, so that the
// request runs where warmslot prepared it.

#include <algorithm>
#include <nlohmann/json.hpp>

#include "routing/observations.hpp"
#include "routing/planner.hpp"
#include "routing/reservation.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

awaitable<void> disk_tier::clear_rivals(upstream::pool& pool, const routing::ticket& t,
                                        const routing::fingerprint& fp) {
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return;
    const auto backend = static_cast<std::size_t>(t.p.backend);
    const auto views = reg_.snapshot();
    if (backend >= views.size()) co_return;
    const auto rivals = routing::floating_rivals(views[backend], *t.p.slot, fp);
    if (rivals.empty()) co_return;
    upstream::slot_client llama(pool, src_.current(), t.p.backend);
    const auto& b = llama.backend();
    // Only slots llama-server itself shows idle: an erase waits for a busy slot, then would
    // clear what its request just computed.
    const auto r = co_await llama.slots();
    const auto seen = routing::read_slots(r.value ? *r.value : nlohmann::json());
    if (!seen) co_return;
    for (const int id : rivals) {
        const auto s = std::find_if(seen->begin(), seen->end(),
                                    [id](const routing::observed_slot& o) { return o.id == id; });
        if (s == seen->end() || s->processing) continue;
        // Reserved while it is erased: no request of warmslot's is planned there meanwhile (its
        // prefix would be erased under it), none sent without id_slot is placed there
        // (preparing), and once erased the registry knows the slot holds nothing. The request
        // this is done for floats, so the reservation goes by what the server just showed.
        const auto& slots = views[backend].slots;
        const auto v = std::find_if(slots.begin(), slots.end(),
                                    [id](const routing::slot_view& o) { return o.id == id; });
        if (v == slots.end()) continue;
        auto idle = reg_.reserve_idle_slot(t.p.backend, id, v->held, true);
        if (!idle) continue;  // a request of warmslot's took it since: not ours to erase
        routing::reservation hold(reg_, std::move(*idle));
        hold.preparing(true);
        const auto e = co_await llama.erase(id);
        if (e.ok()) reg_.set_held(*hold, {}, 0);
        hold.release();
        log()->info(
            "{} slot {} erased: it shared as much of a floating request's prompt as slot {}, "
            "where the prefix was prepared ({})",
            b.name, id, *t.p.slot, e.what());
    }
}

}  // namespace warmslot::tier
