// Tenant isolation (cache.isolation: tenant, docs/security.md "Strict isolation"): what runs
// before a request's prompt reaches llama-server, so that no slot state another tenant's request
// left is reused for it. Slot files are kept apart by their keys (cache::key_scope) and plans
// see other tenants' slots as holding nothing reusable (routing::registry::reserve); here the
// slots themselves are emptied.

#include <algorithm>

#include "routing/reservation.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "service/wakeup.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::service {

namespace {
using routing::clock;

// The slot `t` reserves, emptied for t.tenant: through the disk tier (its prefix saved first)
// when there is one, else erased.
awaitable<tier::disk_tier::hand_over_result> empty_slot(tier::disk_tier* disk, upstream::pool& pool,
                                                        const config::snapshot& cfg,
                                                        routing::registry& reg,
                                                        routing::ticket& t) {
    if (disk != nullptr) co_return co_await disk->hand_over({pool, cfg}, t);
    tier::disk_tier::hand_over_result out;
    upstream::slot_client llama(pool, cfg, t.p.backend);
    const auto e = co_await llama.erase(*t.p.slot);
    out.emptied = e.ok();
    if (out.emptied) reg.set_held(t, {}, 0);
    co_return out;
}

}  // namespace

awaitable<bool> pipeline::isolate(upstream::pool& pool, int backend, routing::ticket& t,
                                  std::optional<int> slot, bool pin, const routing::fingerprint* fp,
                                  outcome& out) {
    const auto views = reg_.snapshot();
    if (backend < 0 || static_cast<std::size_t>(backend) >= views.size()) co_return true;
    const auto& slots = views[static_cast<std::size_t>(backend)].slots;
    const auto others = [&](const routing::slot_view& s) { return s.owner != t.tenant; };
    if (slot) {
        const auto own = std::find_if(slots.begin(), slots.end(),
                                      [&](const routing::slot_view& s) { return s.id == *slot; });
        if (own != slots.end() && others(*own)) {
            const auto r = co_await empty_slot(disk_, pool, out.cfg, reg_, t);
            out.disk.primed += r.primed;
            if (!r.emptied) co_return false;
        }
        if (pin) co_return true;
    }
    // Placed by llama-server itself (a Messages request, whose id_slot it drops; one sent without
    // a slot): its own choice takes the idle slot sharing most of the prompt, so every idle slot
    // of another tenant's that shares any of it (any at all when the prompt is not known, or
    // what the slot holds is not) is emptied first.
    for (const auto& s : slots) {
        if ((slot && s.id == *slot) || s.busy || !others(s)) continue;
        if (fp && !s.held.empty() && routing::common_levels(s.held, fp->levels) == 0) continue;
        auto idle = reg_.reserve_idle_slot(backend, s.id, {});
        if (!idle) continue;  // taken or busy since the snapshot
        routing::reservation hold(reg_, std::move(*idle));
        hold->tenant = t.tenant;
        hold.preparing(true);
        const auto r = co_await empty_slot(disk_, pool, out.cfg, reg_, *hold);
        out.disk.primed += r.primed;
        hold.release();
    }
    co_return true;
}

}  // namespace warmslot::service
