// The registry's plans and reservations: planning a request on the believed slots, reserving
// the planned slot, and the views and totals it answers with. See registry.hpp;
// registry_outcomes.cpp holds what a ticket's end teaches it, registry_backends.cpp what the
// monitor reports of each backend.
#include "routing/registry.hpp"

#include <algorithm>

namespace warmslot::routing {
namespace {

// How a slot that holds another tenant's prompt looks to this tenant's plan.
void hide_other_tenant(slot_view& slot, double tokens_per_byte, bool isolated) {
    if (isolated) {
        // Nothing to reuse there, but as much to lose as before: its value as a victim stays
        // (tokens estimated from bytes when unknown).
        if (slot.held_tokens == 0 && !slot.held.empty()) {
            const double bytes = static_cast<double>(slot.held.back().bytes);
            slot.held_tokens = static_cast<std::uint64_t>(bytes * tokens_per_byte) + 1;
        }
        slot.held.clear();
        slot.session = 0;
    } else {  // another tenant's prompt: seen as empty
        slot.held.clear();
        slot.held_tokens = 0;
        slot.session = 0;
        slot.recent_hits = 0;
    }
}

}  // namespace

registry::registry(std::vector<std::string> backend_names, planner_settings settings)
    : settings_(settings) {
    for (auto& n : backend_names) {
        backend_state b;
        b.view.name = std::move(n);
        b.view.healthy = false;  // until the monitor has seen it answer
        b.view.pinning = false;  // until its slots are known to be stable
        backends_.push_back(std::move(b));
    }
}

void registry::sync(const std::vector<std::string>& names, const std::vector<bool>& retired,
                    planner_settings settings) {
    std::lock_guard lock(mu_);
    settings_ = settings;
    for (std::size_t i = backends_.size(); i < names.size(); ++i) {
        backend_state b;
        b.view.name = names[i];
        b.view.healthy = false;
        b.view.pinning = false;
        backends_.push_back(std::move(b));
    }
    for (std::size_t i = 0; i < backends_.size() && i < retired.size(); ++i) {
        auto& b = backends_[i];
        if (retired[i] && !b.retired) b.view.healthy = false;
        b.retired = retired[i];
    }
    update_multi_model_locked();
}

void registry::set_listener(std::function<void()> f) {
    std::lock_guard lock(listener_mu_);
    listener_ = std::move(f);
}

void registry::set_check_listener(std::function<void(int)> f) {
    std::lock_guard lock(listener_mu_);
    check_listener_ = std::move(f);
}

void registry::notify() {
    std::lock_guard lock(listener_mu_);
    if (listener_) listener_();
}

slot_view* registry::slot_of(backend_state& b, int id) {
    if (id < 0 || static_cast<std::size_t>(id) >= b.view.slots.size()) return nullptr;
    return &b.view.slots[static_cast<std::size_t>(id)];
}

plan registry::preview(const fingerprint* fp, std::string_view model, clock::time_point now,
                       const std::string* tenant, bool isolated) const {
    std::lock_guard lock(mu_);
    return plan_locked(fp, model, now, true, all_backends, tenant, isolated && tenant != nullptr);
}

ticket registry::reserve(const fingerprint* fp, std::string_view model, std::uint64_t request_bytes,
                         clock::time_point now, bool allow_wait, std::size_t backends,
                         bool takes_slot, std::string_view tenant, bool isolated) {
    std::lock_guard lock(mu_);
    ticket t;
    const std::string whose(tenant);
    t.p = plan_locked(fp, model, now, allow_wait, backends, isolated ? &whose : nullptr, isolated);
    t.id = next_ticket_++;
    t.request_bytes = request_bytes;
    t.takes_slot = takes_slot;
    t.tenant = tenant;
    if (t.p.backend < 0) return t;
    t = reserve_locked(std::move(t), now);
    if (fp && t.p.slot && t.p.why != route::wait_hit) {
        backends_[static_cast<std::size_t>(t.p.backend)]
            .planned_for[static_cast<std::size_t>(*t.p.slot)] = fp->levels;
    }
    return t;
}

plan registry::plan_locked(const fingerprint* fp, std::string_view model, clock::time_point now,
                           bool allow_wait, std::size_t backends, const std::string* tenant,
                           bool isolated) const {
    // Copy-assigned into the same vector every time: the slots' and levels' buffers are reused.
    auto& views = views_;
    views.resize(backends_.size());
    // A busy slot frees up no sooner than this: a saving smaller than a short wait is not
    // worth waiting for, even when the running request is already overdue.
    constexpr auto min_wait = std::chrono::milliseconds(10);
    double rate_sum = 0, tpb_sum = 0;
    int rates = 0, tpbs = 0;
    for (std::size_t i = 0; i < backends_.size(); ++i) {
        const auto& b = backends_[i];
        views[i] = b.view;
        // Beyond the caller's config, or waiting for a check after a sign of a restart.
        if (i >= backends || b.checks_done < b.trusted_after) views[i].healthy = false;
        if (b.rate_learned) rate_sum += b.view.prefill_tokens_per_second, ++rates;
        if (b.tpb_learned) tpb_sum += b.view.tokens_per_byte, ++tpbs;
    }
    // A backend that has not served yet is assumed to be like the others, so replicas compare
    // on load and content rather than on a default rate.
    for (std::size_t i = 0; i < views.size(); ++i) {
        // A floating or unpinned request may be on any idle slot.
        const bool unknown = slots_unknown(backends_[i]);
        for (auto& slot : views[i].slots) {
            slot.busy = slot.busy || unknown;
            if (slot.busy) slot.busy_until = std::max(slot.busy_until, now + min_wait);
            if (tenant && slot.owner != *tenant) {
                hide_other_tenant(slot, views[i].tokens_per_byte, isolated);
            }
        }
        if (!backends_[i].rate_learned && rates > 0)
            views[i].prefill_tokens_per_second = rate_sum / rates;
        if (!backends_[i].tpb_learned && tpbs > 0) views[i].tokens_per_byte = tpb_sum / tpbs;
    }
    plan_input in;
    in.request = fp;
    in.model = model;
    in.backends = &views;
    in.settings = settings_;
    if (!allow_wait) in.settings.max_wait_seconds = 0;
    in.now = now;
    in.recently_evicted = tenant ? nullptr : &evicted_view_;
    return prefer_previous_backend(in, views, choose(in));
}

ticket registry::reserve_locked(ticket t, clock::time_point now) {
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    // Only what the slot does not hold yet has to be computed.
    const double tokens = static_cast<double>(t.request_bytes) * b.view.tokens_per_byte;
    const double rate = std::max(1.0, b.view.prefill_tokens_per_second);
    const auto cached = static_cast<double>(t.p.expected_cached_tokens);
    t.expected_prefill_seconds = std::max(0.0, tokens - cached) / rate;
    t.saved_prefill_seconds = cached / rate;
    ++b.view.in_flight;
    ++counters_.requests_by_route[static_cast<int>(t.p.why)];
    if (!t.p.slot) {
        ++(t.takes_slot ? b.unpinned_in_flight : b.unpinned_other);
    } else if (t.p.why != route::wait_hit) {
        auto* s = slot_of(b, *t.p.slot);
        b.reserved_by[static_cast<std::size_t>(*t.p.slot)] = t.id;
        s->busy = true;
        s->busy_until = now + std::chrono::duration_cast<clock::duration>(
                                  std::chrono::duration<double>(t.expected_prefill_seconds));
    }
    return t;
}

bool registry::try_take(ticket& t, clock::time_point now) {
    std::lock_guard lock(mu_);
    if (t.p.backend < 0 || !t.p.slot) return true;
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    const auto i = static_cast<std::size_t>(*t.p.slot);
    if (i >= b.reserved_by.size() || b.reserved_by[i] != 0 || b.outside_busy[i] ||
        slots_unknown(b)) {
        return false;
    }
    b.reserved_by[i] = t.id;
    b.view.slots[i].busy = true;
    b.view.slots[i].busy_until = now;
    return true;
}

void registry::mark_floating(ticket& t) {
    std::lock_guard lock(mu_);
    if (t.p.backend < 0 || t.floating) return;
    t.floating = true;
    auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
    ++b.floating_in_flight;
    if (!t.p.slot) return;
    const auto i = static_cast<std::size_t>(*t.p.slot);
    if (i < b.reserved_by.size() && b.reserved_by[i] == t.id) b.floating_slot[i] = true;
}

// A miss goes back to the backend that held the prefix last, when it has an idle slot: its
// RAM cache (or slot directory) may still have the prefix, and documents stop bouncing between
// replicas.
plan registry::prefer_previous_backend(const plan_input& in, const std::vector<backend_view>& views,
                                       plan p) const {
    const bool miss = p.why == route::miss_new_prefix || p.why == route::miss_evicted;
    if (!miss || !in.request || in.request->levels.empty() || p.backend < 0) return p;
    const auto first = in.request->levels.front().hash;
    for (std::size_t i = 0; i < backends_.size(); ++i) {
        if (static_cast<int>(i) == p.backend) continue;
        const auto& ev = backends_[i].evicted;
        if (std::find(ev.begin(), ev.end(), first) == ev.end()) continue;
        std::vector<backend_view> only = views;
        for (std::size_t j = 0; j < only.size(); ++j) only[j].healthy = only[j].healthy && j == i;
        plan_input again = in;
        again.backends = &only;
        const plan q = choose(again);
        if (q.backend == static_cast<int>(i) && q.slot) return q;
    }
    return p;
}

std::optional<ticket> registry::reserve_idle_slot(int backend, int slot,
                                                  const std::vector<prefix_level>& must_hold,
                                                  bool seen_idle) {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return std::nullopt;
    auto& b = backends_[static_cast<std::size_t>(backend)];
    auto* s = slot_of(b, slot);
    const auto i = static_cast<std::size_t>(slot);
    if (!s || b.reserved_by[i] != 0 || b.outside_busy[i] || (!seen_idle && s->busy) ||
        (!seen_idle && slots_unknown(b))) {
        return std::nullopt;
    }
    if (!must_hold.empty() && common_levels(s->held, must_hold) < must_hold.size()) {
        return std::nullopt;
    }
    ticket t;
    t.id = next_ticket_++;
    t.p.backend = backend;
    t.p.slot = slot;
    t.p.why = route::hit;
    t.p.matched_levels = must_hold.size();
    b.reserved_by[i] = t.id;
    s->busy = true;
    ++b.view.in_flight;
    return t;
}

std::vector<backend_view> registry::snapshot() const {
    std::lock_guard lock(mu_);
    std::vector<backend_view> out;
    for (const auto& b : backends_) out.push_back(b.view);
    return out;
}

counters registry::totals() const {
    std::lock_guard lock(mu_);
    counters c = counters_;
    for (const auto& b : backends_) {
        c.in_flight += b.view.in_flight;
        c.reserved_slots += static_cast<std::uint64_t>(std::count_if(
            b.reserved_by.begin(), b.reserved_by.end(), [](std::uint64_t id) { return id != 0; }));
    }
    return c;
}

}  // namespace warmslot::routing
