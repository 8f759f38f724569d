#include "routing/registry.hpp"

#include <algorithm>
#include <cmath>

namespace warmslot::routing {
namespace {

constexpr std::size_t max_evicted = 4096;
constexpr double hits_half_life_seconds = 600;
constexpr double rate_weight = 0.3; // exponential moving average weight of a new observation

double ema(double old, double sample) { return old * (1 - rate_weight) + sample * rate_weight; }

double decayed(double hits, clock::time_point from, clock::time_point to) {
    if (from == clock::time_point{} || to <= from) return hits;
    const double dt = std::chrono::duration<double>(to - from).count();
    return hits * std::exp2(-dt / hits_half_life_seconds);
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

ticket registry::reserve(const fingerprint* fp, std::string_view model,
                         std::uint64_t request_bytes, clock::time_point now, bool allow_wait,
                         std::size_t backends, bool takes_slot, std::string_view tenant,
                         bool isolated) {
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
        backends_[static_cast<std::size_t>(t.p.backend)].planned_for[static_cast<std::size_t>(*t.p.slot)] =
            fp->levels;
    }
    return t;
}

plan registry::plan_locked(const fingerprint* fp, std::string_view model, clock::time_point now,
                           bool allow_wait, std::size_t backends,
                           const std::string* tenant, bool isolated) const {
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
                if (isolated) {
                    // Nothing to reuse there, but as much to lose as before: its value as a
                    // victim stays (tokens estimated from bytes when unknown).
                    if (slot.held_tokens == 0 && !slot.held.empty()) {
                        slot.held_tokens = static_cast<std::uint64_t>(
                            static_cast<double>(slot.held.back().bytes) *
                            views[i].tokens_per_byte) + 1;
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
        }
        if (!backends_[i].rate_learned && rates > 0) views[i].prefill_tokens_per_second = rate_sum / rates;
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
    const double rate =
        s->prompt_ms > 0 ? static_cast<double>(s->processed) / (s->prompt_ms / 1000.0) : 0;
    if (s->processed >= 64 && rate > 0) {
        b.view.prefill_tokens_per_second =
            b.rate_learned ? ema(b.view.prefill_tokens_per_second, rate) : rate;
        b.rate_learned = true;
    }
    if (fp && fp->total_bytes >= 512) {
        const double tpb = static_cast<double>(s->cached + s->processed) /
                           static_cast<double>(fp->total_bytes);
        const double sample = std::clamp(tpb, 0.05, 4.0);
        b.view.tokens_per_byte = b.tpb_learned ? ema(b.view.tokens_per_byte, sample) : sample;
        b.tpb_learned = true;
    }
    counters_.prompt_tokens_processed += static_cast<std::uint64_t>(std::max(0L, s->processed));
    counters_.prompt_tokens_reused += static_cast<std::uint64_t>(std::max(0L, s->cached));
    counters_.prefill_seconds_saved +=
        static_cast<double>(s->cached) / std::max(1.0, b.view.prefill_tokens_per_second);
    const bool mispredicted = t.p.expected_cached_tokens >= 256 &&
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
        if (evicted_view_.size() < max_evicted) evicted_view_.push_back(l.hash);
        else evicted_view_[evicted_next_] = l.hash;
        evicted_next_ = (evicted_next_ + 1) % max_evicted;
        b.evicted.push_back(l.hash);
        if (b.evicted.size() > max_evicted) b.evicted.pop_front();
    }
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

void registry::set_info(int backend, const backend_info& info, bool pinning) {
    std::lock_guard lock(mu_);
    auto& b = backends_[static_cast<std::size_t>(backend)];
    const bool changed = !b.info || b.info->total_slots != info.total_slots ||
                         b.info->model_path != info.model_path ||
                         b.info->build_info != info.build_info;
    b.info = info;
    b.view.models = info.models;
    b.view.pinning = pinning;
    update_multi_model_locked();
    if (!changed) return;
    // Another process (build, model or slot count): nothing it holds is known. A slot still
    // reserved by a ticket stays reserved until that ticket ends: its owner may be working on
    // the new process's slot already, and a second request must never pin it meanwhile.
    const auto n = static_cast<std::size_t>(std::max(0, info.total_slots));
    b.reserved_by.resize(n, 0);
    b.preparing.resize(n, false);
    b.waiting_turn.resize(n, false);
    b.sent_at.resize(n, clock::time_point{});
    b.planned_for.resize(n);
    b.floating_slot.resize(n, false);
    b.settled.resize(n, false);
    b.view.slots.assign(n, slot_view{});
    for (std::size_t i = 0; i < n; ++i) {
        b.view.slots[i].id = static_cast<int>(i);
        b.view.slots[i].busy = b.reserved_by[i] != 0;
    }
    b.outside_busy.assign(n, false);
}

void registry::set_healthy(int backend, bool healthy) {
    {
        std::lock_guard lock(mu_);
        auto& b = backends_[static_cast<std::size_t>(backend)];
        b.view.healthy = healthy && !b.retired && !b.stopped;
    }
    notify();
}

void registry::set_foreign(int backend, bool foreign) {
    {
        std::lock_guard lock(mu_);
        auto& b = backends_[static_cast<std::size_t>(backend)];
        b.foreign = foreign;
        if (foreign) b.view.healthy = false;
    }
    notify();
}

bool registry::foreign(int backend) const {
    std::lock_guard lock(mu_);
    const auto i = static_cast<std::size_t>(backend);
    return i < backends_.size() && backends_[i].foreign;
}

void registry::set_stopped(int backend, bool stopped) {
    std::lock_guard lock(mu_);
    auto& b = backends_[static_cast<std::size_t>(backend)];
    b.stopped = stopped;
    if (stopped) b.view.healthy = false;
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

void registry::set_work(int backend, int slot, slot_work w, std::uint64_t total) {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return;
    auto* s = slot_of(backends_[static_cast<std::size_t>(backend)], slot);
    if (!s) return;
    s->work = w;
    s->work_done = 0;
    s->work_total = total;
    s->work_since = w == slot_work::none ? clock::time_point{} : clock::now();
}

std::pair<slot_work, std::uint64_t> registry::work_of(int backend, int slot) const {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return {};
    for (const auto& s : backends_[static_cast<std::size_t>(backend)].view.slots) {
        if (s.id == slot) return {s.work, s.work_done};
    }
    return {};
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

void registry::forget_all(int backend) {
    std::lock_guard lock(mu_);
    auto& b = backends_[static_cast<std::size_t>(backend)];
    for (auto& s : b.view.slots) {
        if (!s.held.empty()) ++counters_.corrections;
        s.held.clear();
        s.held_tokens = 0;
    }
}

void registry::reconcile(int backend, const std::vector<observed_slot>& slots,
                         clock::time_point now) {
    apply_reconcile(backend, slots, now);
    notify();
}

void registry::apply_reconcile(int backend, const std::vector<observed_slot>& slots,
                                clock::time_point now) {
    std::lock_guard lock(mu_);
    auto& b = backends_[static_cast<std::size_t>(backend)];
    settle_locked(b, slots, now);
    for (const auto& o : slots) {
        auto* s = slot_of(b, o.id);
        if (!s) continue;
        const auto i = static_cast<std::size_t>(o.id);
        const bool ours = b.reserved_by[i] != 0;
        const bool our_tail = s->last_use != clock::time_point{} && now - s->last_use < own_tail;
        b.outside_busy[i] = o.processing && !ours && !our_tail;
        s->busy = ours || b.outside_busy[i];
        // What it does now, for status: warmslot's own work keeps its name; a task seen running
        // is "running"; the prompt tokens done so far come from the slot's own count.
        if (o.processing) {
            if (s->work == slot_work::none) {
                s->work = slot_work::running;
                s->work_total = 0;
                s->work_since = now;
            }
            s->work_done = o.n_prompt_tokens.value_or(0);
        } else if (s->work == slot_work::running) {
            s->work = slot_work::none;
            s->work_done = 0;
            s->work_since = clock::time_point{};
        }
        if (ours || o.processing) continue;
        const std::uint64_t tokens = o.n_prompt_tokens.value_or(0);
        const auto diff = tokens > s->held_tokens ? tokens - s->held_tokens : s->held_tokens - tokens;
        if (diff > 2) {
            // Someone else used the slot, the server cleared it, or it restarted.
            if (!s->held.empty()) {
                ++counters_.corrections;
                evicted(b, s->held);
            }
            s->held.clear();
            s->held_tokens = tokens;
            s->last_use = now;
        }
    }
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

std::optional<backend_info> registry::info(int backend) const {
    std::lock_guard lock(mu_);
    return backends_[static_cast<std::size_t>(backend)].info;
}

// Replicas may load the same model from different directories: compare file names.
void registry::update_multi_model_locked() {
    std::string first;
    bool multi = false;
    for (const auto& b : backends_) {
        if (b.retired || !b.info || b.info->model_path.empty()) continue;
        const auto& path = b.info->model_path;
        const std::string file = path.substr(path.find_last_of("/\\") + 1);
        if (first.empty()) {
            first = file;
        } else if (file != first) {
            multi = true;
            break;
        }
    }
    multi_model_.store(multi, std::memory_order_release);
}

}  // namespace warmslot::routing
