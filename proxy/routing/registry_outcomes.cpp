// What the registry learns when a ticket ends: the backend's prefill rate and tokens per byte,
// the prompt its slot now holds, the levels evicted on the way, and the reservation's end
// (complete, cancel, release). Also set_held, a slot's content after a restore or a priming.
// See registry.hpp.
#include <algorithm>
#include <cmath>

#include "routing/registry.hpp"

namespace warmslot::routing {
namespace {

constexpr std::size_t max_evicted = 4096;
constexpr double hits_half_life_seconds = 600;
constexpr double rate_weight = 0.3;  // exponential moving average weight of a new observation

double ema(double old, double sample) { return old * (1 - rate_weight) + sample * rate_weight; }

double decayed(double hits, clock::time_point from, clock::time_point to) {
    if (from == clock::time_point{} || to <= from) return hits;
    const double dt = std::chrono::duration<double>(to - from).count();
    return hits * std::exp2(-dt / hits_half_life_seconds);
}

// The backend's prefill rate and tokens per byte, from one answer: the first sample, then a
// moving average. Short prompts teach neither.
void learn_rates(backend_view& v, bool& rate_learned, bool& tpb_learned, const fingerprint* fp,
                 const api::prompt_stats& s) {
    const double rate =
        s.prompt_ms > 0 ? static_cast<double>(s.processed) / (s.prompt_ms / 1000.0) : 0;
    if (s.processed >= 64 && rate > 0) {
        v.prefill_tokens_per_second = rate_learned ? ema(v.prefill_tokens_per_second, rate) : rate;
        rate_learned = true;
    }
    if (fp && fp->total_bytes >= 512) {
        const double tpb =
            static_cast<double>(s.cached + s.processed) / static_cast<double>(fp->total_bytes);
        const double sample = std::clamp(tpb, 0.05, 4.0);
        v.tokens_per_byte = tpb_learned ? ema(v.tokens_per_byte, sample) : sample;
        tpb_learned = true;
    }
}

}  // namespace

void registry::end_unpinned_locked(backend_state& b, const ticket& t) {
    auto& n = t.takes_slot ? b.unpinned_in_flight : b.unpinned_other;
    if (n > 0) --n;
}

void registry::cancel(const ticket& t) {
    {
        std::lock_guard lock(mu_);
        // The request may have been cut during prefill: what the slot holds is unknown.
        if (const auto i = end_ticket_locked(t)) {
            backends_[static_cast<std::size_t>(t.p.backend)].view.slots[*i].held.clear();
        }
    }
    notify();
}

void registry::complete(const ticket& t, const fingerprint* fp,
                        const std::optional<api::prompt_stats>& s, clock::time_point now) {
    if (!s) return cancel(t);
    if (record_complete(t, fp, *s, now)) want_check(t.p.backend);
    notify();
}

bool registry::record_complete(const ticket& t, const fingerprint* fp, const api::prompt_stats& st,
                               clock::time_point now) {
    const auto* s = &st;
    std::lock_guard lock(mu_);
    if (t.p.backend < 0) return false;
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    if (b.view.in_flight > 0) --b.view.in_flight;
    if (t.floating && b.floating_in_flight > 0) --b.floating_in_flight;
    learn_rates(b.view, b.rate_learned, b.tpb_learned, fp, *s);
    counters_.prompt_tokens_processed += static_cast<std::uint64_t>(std::max(0L, s->processed));
    counters_.prompt_tokens_reused += static_cast<std::uint64_t>(std::max(0L, s->cached));
    counters_.prefill_seconds_saved +=
        static_cast<double>(s->cached) / std::max(1.0, b.view.prefill_tokens_per_second);
    const bool mispredicted =
        t.p.expected_cached_tokens >= 256 &&
        static_cast<std::uint64_t>(s->cached) * 2 < t.p.expected_cached_tokens;
    if (mispredicted) ++counters_.mispredictions;
    if (!t.p.slot) {
        end_unpinned_locked(b, t);
        return mispredicted;
    }
    const auto i = static_cast<std::size_t>(*t.p.slot);
    if (i >= b.reserved_by.size()) return mispredicted;
    if (b.reserved_by[i] == t.id) unreserve_locked(b, i);
    auto& slot = b.view.slots[i];
    slot.busy = b.reserved_by[i] != 0 || b.outside_busy[i];
    // A floating request that reused little may have run on another slot (llama-server chose).
    // It is believed here all the same, with the tokens it left: the next GET /slots clears the
    // belief when this slot holds another count (apply_reconcile), and then finds the slot it
    // ran on changed. Cleared now, a first request on a fresh slot would never be known there.
    std::vector<prefix_level> now_held = fp ? fp->levels : std::vector<prefix_level>{};
    if (!slot.held.empty() && common_levels(slot.held, now_held) < slot.held.size()) {
        evicted(b, slot.held);
    }
    slot.recent_hits = decayed(slot.recent_hits, slot.last_use, now);
    if (s->cached > 0 && t.p.matched_levels > 0) slot.recent_hits += 1;
    slot.held = std::move(now_held);
    slot.owner = t.tenant;
    slot.session = fp ? fp->session : 0;
    slot.held_tokens = static_cast<std::uint64_t>(
        std::max(0L, s->cached + s->processed + std::max(0L, s->predicted - 1)));
    slot.last_use = now;
    return mispredicted;
}

void registry::evicted(backend_state& b, const std::vector<prefix_level>& levels) {
    for (const auto& l : levels) {
        // A ring: the newest hash replaces the oldest (the planner only tests membership).
        if (evicted_view_.size() < max_evicted)
            evicted_view_.push_back(l.hash);
        else
            evicted_view_[evicted_next_] = l.hash;
        evicted_next_ = (evicted_next_ + 1) % max_evicted;
        b.evicted.push_back(l.hash);
        if (b.evicted.size() > max_evicted) b.evicted.pop_front();
    }
}

void registry::set_held(const ticket& t, std::vector<prefix_level> levels, std::uint64_t tokens) {
    std::lock_guard lock(mu_);
    if (t.p.backend < 0 || !t.p.slot) return;
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    auto* s = slot_of(b, *t.p.slot);
    if (!s) return;
    if (!s->held.empty() && common_levels(s->held, levels) < s->held.size()) evicted(b, s->held);
    s->held = std::move(levels);
    s->held_tokens = tokens;
    s->owner = t.tenant;
}

void registry::release(const ticket& t) {
    {
        std::lock_guard lock(mu_);
        end_ticket_locked(t);
    }
    notify();
}

// Every ticket counted in in_flight (and as floating or unpinned) when it was made: that count
// ends here whether or not the slot is still reserved by it (a restart with another build or
// slot count may have dropped the slot since). Returns the slot it still reserved, if any.
std::optional<std::size_t> registry::end_ticket_locked(const ticket& t) {
    if (t.p.backend < 0) return std::nullopt;
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    if (b.view.in_flight > 0) --b.view.in_flight;
    if (t.floating && b.floating_in_flight > 0) --b.floating_in_flight;
    if (!t.p.slot) {
        end_unpinned_locked(b, t);
        return std::nullopt;
    }
    const auto i = static_cast<std::size_t>(*t.p.slot);
    if (i >= b.reserved_by.size() || b.reserved_by[i] != t.id) return std::nullopt;
    unreserve_locked(b, i);
    return i;
}

void registry::unreserve_locked(backend_state& b, std::size_t i) {
    b.reserved_by[i] = 0;
    b.preparing[i] = false;
    b.waiting_turn[i] = false;
    b.sent_at[i] = clock::time_point{};
    b.planned_for[i].clear();
    b.floating_slot[i] = false;
    b.settled[i] = false;
    b.view.slots[i].busy = b.outside_busy[i];
}

}  // namespace warmslot::routing
