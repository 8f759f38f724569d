// A slot that holds a request's stable prefix and more: keep it for llama-server's rollback, or
// restore the prefix's file into it first (cache/rollback.hpp says why either can be cheaper).
#include <fmt/format.h>

#include "routing/observations.hpp"
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

bool disk_tier::holds_more(const routing::ticket& t, const prefix& p) const {
    const auto views = reg_.snapshot();
    const auto b = static_cast<std::size_t>(t.p.backend);
    if (!t.p.slot || b >= views.size()) return false;
    for (const auto& s : views[b].slots) {
        if (s.id == *t.p.slot) return s.held.size() > p.levels.size();
    }
    return false;
}

awaitable<disk_action> disk_tier::restore_or_keep(const request_scope& rq, routing::ticket& t,
                                                  const prefix& p, bool judged) {
    disk_action kept;
    if (!restores_allowed(t.p.backend)) co_return kept;
    auto* idx = p.index;
    // Leased before the lookup, as for any restore: no eviction deletes the file meanwhile.
    auto lease = leases_.take(p.key);
    const auto found = co_await on_index(index_ex_, [idx, key = p.key] { return idx->find(key); });
    if (!found) co_return kept;  // nothing to compare with: llama-server rolls back
    const auto views = reg_.snapshot();
    cache::rollback_costs costs;
    costs.prefill_tokens_per_second =
        views[static_cast<std::size_t>(t.p.backend)].prefill_tokens_per_second;
    costs.file_bytes = found->bytes;
    const auto& backend = rq.cfg->backends[static_cast<std::size_t>(t.p.backend)];
    const auto info = reg_.info(t.p.backend);
    const auto prior = cache::rollback_prior(
        info && routing::rolls_back_to_checkpoints_only(info->architecture),
        backend.supervised() ? routing::ctx_checkpoints_of(backend.command,
                                                           [&backend](const std::string& v) {
                                                               return backend.env_value(v);
                                                           })
                             : backend.ctx_checkpoints);
    {
        std::lock_guard lock(mu_);
        auto& state = backends_[t.p.backend];
        costs.overshoot_tokens = state.rollbacks.expected_overshoot(p.key, found->tokens, prior);
        costs.restore_bytes_per_second = state.restores.estimate(found->bytes, found->save_ms);
    }
    const auto choice = cache::choose_restore_or_rollback(costs);
    const auto& name = backend.name;
    log()->info("{} slot {} holds prefix {} ({} tokens) and more: {} ({})", name, *t.p.slot, p.key,
                found->tokens, choice.restore ? "restoring its file" : "kept for a rollback",
                choice.why);
    if (!choice.restore) {
        kept.choice = choice.why;
        kept.key = p.key;
        kept.kept_prefix_tokens = judged ? found->tokens : 0;  // learned from afterwards
        co_return kept;
    }
    // The slot's prefix, another tenant's maybe, is saved at the asking tenant's cost.
    const auto before = co_await save_reserved(rq, t, p.key, false, p.tenant);
    auto a = co_await restore(rq, t, p, *found);
    a.primed += before.primed;
    a.judged = judged;
    if (a.what == disk_action::kind::restored) a.choice = choice.why;
    co_return a;
}

}  // namespace warmslot::tier
