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

awaitable<void> disk_tier::clear_rivals(const request_scope& rq, const routing::ticket& t,
                                        const routing::fingerprint& fp,
                                        const cache::token_chain* chain, bool prepared) {
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return;
    const auto backend = static_cast<std::size_t>(t.p.backend);
    const auto views = reg_.snapshot();
    if (backend >= views.size()) co_return;
    auto rivals = routing::floating_rivals(views[backend], *t.p.slot, fp);
    // What the prepared slot holds is a prefix of the request's tokens; an idle slot sharing
    // as many (within a block) may win llama-server's choice, and a hybrid model cannot roll
    // back to the shared part there.
    const auto info = reg_.info(t.p.backend);
    if (chain && prepared && info && routing::rolls_back_to_checkpoints_only(info->architecture)) {
        const auto own =
            std::find_if(views[backend].slots.begin(), views[backend].slots.end(),
                         [&](const routing::slot_view& s) { return s.id == *t.p.slot; });
        const auto rival = token_rival(t, *chain);
        if (own != views[backend].slots.end() && rival &&
            rival->second + cache::token_block > own->held_tokens &&
            std::find(rivals.begin(), rivals.end(), rival->first) == rivals.end()) {
            rivals.push_back(rival->first);
        }
    }
    if (rivals.empty()) co_return;
    upstream::slot_client llama(rq.pool, rq.cfg, t.p.backend);
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

std::optional<std::pair<int, std::size_t>> disk_tier::token_rival(
    const routing::ticket& t, const cache::token_chain& chain) const {
    if (!t.p.slot || t.p.backend < 0) return std::nullopt;
    const auto views = reg_.snapshot();
    const auto backend = static_cast<std::size_t>(t.p.backend);
    if (backend >= views.size()) return std::nullopt;
    std::optional<std::pair<int, std::size_t>> best;
    std::lock_guard lock(mu_);
    for (const auto& s : views[backend].slots) {
        if (s.id == *t.p.slot || s.busy || s.held.empty()) continue;
        const auto it = slot_blocks_.find({t.p.backend, s.id});
        // What was prepared there is what it holds only while the registry believes so.
        if (it == slot_blocks_.end() || it->second.level != s.held.back().hash) continue;
        const auto tokens =
            cache::common_blocks(it->second.blocks, chain.blocks()) * cache::token_block;
        if (tokens > 0 && (!best || tokens > best->second)) best = std::pair{s.id, tokens};
    }
    return best;
}

}  // namespace warmslot::tier
