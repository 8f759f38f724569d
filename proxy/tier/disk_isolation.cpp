// Tenant isolation: a slot another tenant's request filled is saved (when its prefix is worth a
// file and not on disk yet) and erased before it serves a request of another tenant, so that
// llama-server reuses nothing of it, and its owner finds its prefix on disk afterwards.

#include "routing/reservation.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

awaitable<disk_tier::hand_over_result> disk_tier::hand_over(const request_scope& rq,
                                                            routing::ticket& t) {
    hand_over_result out;
    if (t.p.backend < 0 || !t.p.slot) co_return out;
    const int slot = *t.p.slot;
    if (enabled_for(t.p.backend)) {
        try {
            const auto saved = co_await save_reserved(rq, t, "", false, t.tenant);
            out.primed = saved.primed;
        } catch (const std::exception& e) {
            log()->warn("slot {} not saved before it was erased for another tenant: {}", slot,
                        e.what());
        }
    }
    try {
        upstream::slot_client llama(rq.pool, rq.cfg, t.p.backend);
        const auto e = co_await llama.erase(slot);
        out.emptied = e.ok();
        if (out.emptied) {
            reg_.set_held(t, {}, 0);  // empty, and the tenant's it was emptied for
        } else {
            log()->warn("{} slot {} not erased for another tenant: {}", llama.backend().name, slot,
                        e.what());
        }
    } catch (const std::exception& e) {
        log()->warn("slot {} not erased for another tenant: {}", slot, e.what());
    }
    co_return out;
}

}  // namespace warmslot::tier
