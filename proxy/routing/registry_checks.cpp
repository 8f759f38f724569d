// The registry's side of backend checks (want_check and the monitor's check counts), of
// unpinned sends outside a plan, of the probe's reservations, and of slots being prepared:
// see registry.hpp.
#include <algorithm>

#include "routing/registry.hpp"

namespace warmslot::routing {

void registry::begin_unpinned(int backend) {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return;
    ++backends_[static_cast<std::size_t>(backend)].unpinned_in_flight;
}

void registry::end_unpinned(int backend) {
    {
        std::lock_guard lock(mu_);
        if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return;
        auto& n = backends_[static_cast<std::size_t>(backend)].unpinned_in_flight;
        if (n > 0) --n;
    }
    notify();
}

std::uint64_t registry::want_check(int backend) {
    // Without a monitor (a test of the pipeline alone) nobody checks: nothing to wait for.
    std::lock_guard listening(listener_mu_);
    if (!check_listener_) return 0;
    std::uint64_t target = 0;
    {
        std::lock_guard lock(mu_);
        if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return 0;
        auto& b = backends_[static_cast<std::size_t>(backend)];
        b.trusted_after = std::max(b.trusted_after, b.checks_started + 1);
        target = b.trusted_after;
    }
    check_listener_(backend);
    return target;
}

std::uint64_t registry::checks_done(int backend) const {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return 0;
    return backends_[static_cast<std::size_t>(backend)].checks_done;
}

void registry::check_started(int backend) {
    std::lock_guard lock(mu_);
    ++backends_[static_cast<std::size_t>(backend)].checks_started;
}

void registry::check_done(int backend) {
    {
        std::lock_guard lock(mu_);
        auto& b = backends_[static_cast<std::size_t>(backend)];
        b.checks_done = b.checks_started;
    }
    notify();
}

std::vector<ticket> registry::reserve_idle(int backend, std::size_t count) {
    std::lock_guard lock(mu_);
    std::vector<ticket> out;
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return out;
    auto& b = backends_[static_cast<std::size_t>(backend)];
    if (slots_unknown(b)) return out;
    std::vector<std::size_t> idle;
    for (std::size_t i = 0; i < b.view.slots.size() && idle.size() < count; ++i) {
        if (b.reserved_by[i] == 0 && !b.outside_busy[i] && !b.view.slots[i].busy) idle.push_back(i);
    }
    if (idle.size() < count) return out;
    for (const auto i : idle) {
        ticket t;
        t.id = next_ticket_++;
        t.p.backend = backend;
        t.p.slot = b.view.slots[i].id;
        t.p.why = route::scratch;
        b.reserved_by[i] = t.id;
        b.view.slots[i].busy = true;
        ++b.view.in_flight;
        out.push_back(std::move(t));
    }
    return out;
}

// The marks of slots being prepared (registry.hpp, set_preparing).
void registry::set_preparing(const ticket& t, bool on) {
    {
        std::lock_guard lock(mu_);
        if (t.p.backend < 0 || !t.p.slot) return;
        auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
        const auto i = static_cast<std::size_t>(*t.p.slot);
        if (i >= b.reserved_by.size() || b.reserved_by[i] != t.id) return;
        b.preparing[i] = on;
    }
    if (!on) notify();
}

void registry::set_waiting_turn(const ticket& t, bool on) {
    {
        std::lock_guard lock(mu_);
        if (t.p.backend < 0 || !t.p.slot) return;
        auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
        const auto i = static_cast<std::size_t>(*t.p.slot);
        if (i >= b.reserved_by.size() || b.reserved_by[i] != t.id) return;
        b.waiting_turn[i] = on;
    }
    notify();  // a lower slot's request waiting for this one may go now
}

bool registry::has_free_slot(int backend) const {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return false;
    const auto& b = backends_[static_cast<std::size_t>(backend)];
    std::size_t reserved = 0;
    std::size_t seen_busy = 0;  // busy without a ticket (unpinned requests among them)
    for (std::size_t s = 0; s < b.view.slots.size(); ++s) {
        if (b.reserved_by[s] != 0) {
            ++reserved;
        } else if (b.outside_busy[s]) {
            ++seen_busy;
        }
    }
    // Each unpinned request runs on a slot no ticket names, seen busy there or not yet.
    return reserved + std::max(seen_busy, b.unpinned_in_flight) < b.view.slots.size();
}

bool registry::has_idle_slot(std::size_t backends) const {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < backends_.size() && i < backends; ++i) {
        const auto& b = backends_[i];
        if (b.retired || b.stopped || !b.view.healthy || b.checks_done < b.trusted_after ||
            slots_unknown(b)) {
            continue;
        }
        for (std::size_t s = 0; s < b.view.slots.size(); ++s) {
            if (!b.view.slots[s].busy && b.reserved_by[s] == 0 && !b.outside_busy[s]) return true;
        }
    }
    return false;
}

bool registry::preparing(int backend) const {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return false;
    const auto& b = backends_[static_cast<std::size_t>(backend)];
    for (std::size_t i = 0; i < b.preparing.size(); ++i) {
        if (b.preparing[i]) return true;
    }
    return false;
}

void registry::sending(const ticket& t, clock::time_point now) {
    {
        std::lock_guard lock(mu_);
        if (t.p.backend < 0 || !t.p.slot) return;
        auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
        const auto i = static_cast<std::size_t>(*t.p.slot);
        if (i >= b.reserved_by.size() || b.reserved_by[i] != t.id) return;
        b.sent_at[i] = now;
    }
    notify();
}

registry::ahead_state registry::ahead(int backend, int slot, const fingerprint& request) const {
    ahead_state out;
    const std::size_t need = request.stable_levels;
    std::lock_guard lock(mu_);
    if (need == 0 || backend < 0 || static_cast<std::size_t>(backend) >= backends_.size())
        return out;
    const auto& b = backends_[static_cast<std::size_t>(backend)];
    const auto own = static_cast<std::size_t>(std::max(0, slot));
    const auto shares = [&](std::size_t i) {
        return common_levels(b.view.slots[i].held, request.levels) >= need ||
               (b.preparing[i] && common_levels(b.planned_for[i], request.levels) >= need);
    };
    // A planned slot holding the prefix loses only ties, to lower ids; one without it loses to
    // every slot with it.
    const bool own_holds =
        own < b.view.slots.size() && common_levels(b.view.slots[own].held, request.levels) >= need;
    for (std::size_t i = 0; i < b.reserved_by.size(); ++i) {
        if (i == own || (own_holds && i > own) || b.reserved_by[i] == 0 || !shares(i)) continue;
        // A higher slot whose request waits for its turn too, and would count this slot as
        // ahead of it (this slot holds or is being prepared with its prefix): it waits for
        // this one, so this one goes. One that would not is not waiting for this one.
        const auto waits_for_own = [&] {
            return own < b.view.slots.size() &&
                   (common_levels(b.view.slots[own].held, b.planned_for[i]) >= need ||
                    (b.preparing[own] &&
                     common_levels(b.planned_for[own], b.planned_for[i]) >= need));
        };
        if (i > own && b.waiting_turn[i] && waits_for_own()) continue;
        if (b.sent_at[i] == clock::time_point{}) {
            out.unsent = true;
        } else {
            out.sent.emplace_back(static_cast<int>(i), b.sent_at[i]);
        }
    }
    return out;
}

void registry::set_drowsy(int backend, bool drowsy) {
    std::lock_guard lock(mu_);
    const auto i = static_cast<std::size_t>(backend);
    if (i < backends_.size()) backends_[i].drowsy = drowsy;
}

bool registry::drowsy(int backend) const {
    std::lock_guard lock(mu_);
    const auto i = static_cast<std::size_t>(backend);
    return i < backends_.size() && backends_[i].drowsy;
}

void registry::set_asleep(int backend, bool asleep) {
    std::lock_guard lock(mu_);
    const auto i = static_cast<std::size_t>(backend);
    if (i < backends_.size()) backends_[i].asleep = asleep;
}

bool registry::asleep(int backend) const {
    std::lock_guard lock(mu_);
    const auto i = static_cast<std::size_t>(backend);
    return i < backends_.size() && backends_[i].asleep;
}

bool registry::move_reservation(ticket& t, int slot) {
    {
        std::lock_guard lock(mu_);
        if (t.p.backend < 0 || !t.p.slot || *t.p.slot == slot) return false;
        auto& b = backends_[static_cast<std::size_t>(t.p.backend)];
        const auto from = static_cast<std::size_t>(*t.p.slot);
        const auto to = static_cast<std::size_t>(slot);
        if (slot < 0 || to >= b.reserved_by.size() || from >= b.reserved_by.size()) return false;
        if (b.reserved_by[from] != t.id || b.reserved_by[to] != 0 || b.outside_busy[to] ||
            b.view.slots[to].busy) {
            return false;
        }
        const bool floating = b.floating_slot[from];
        auto planned = std::move(b.planned_for[from]);
        unreserve_locked(b, from);
        b.reserved_by[to] = t.id;
        b.floating_slot[to] = floating;
        b.planned_for[to] = std::move(planned);
        b.view.slots[to].busy = true;
        b.view.slots[to].busy_until = b.view.slots[from].busy_until;
        t.p.slot = slot;
        // What it shares there is the slot's own prompt, not the levels planned on: no
        // reuse is promised (a miss of it is no sign of a restart).
        t.p.matched_levels = 0;
        t.p.expected_cached_tokens = 0;
    }
    notify();
    return true;
}

// Floating requests seen running on their planned slots (registry.hpp, settle_floating).
std::size_t registry::settled_count(const backend_state& b) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < b.settled.size(); ++i) {
        if (b.settled[i] && b.reserved_by[i] != 0) ++n;
    }
    return n;
}

std::size_t registry::unsettled_floating(int backend, clock::time_point* newest) const {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return 0;
    const auto& b = backends_[static_cast<std::size_t>(backend)];
    if (b.unpinned_in_flight > 0) return 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < b.floating_slot.size(); ++i) {
        if (!b.floating_slot[i] || b.settled[i] || b.reserved_by[i] == 0) continue;
        if (b.sent_at[i] == clock::time_point{}) continue;
        ++n;
        if (newest) *newest = std::max(*newest, b.sent_at[i]);
    }
    return n;
}

bool registry::settle_floating(int backend, const std::vector<observed_slot>& slots,
                               clock::time_point now) {
    bool settled = false;
    {
        std::lock_guard lock(mu_);
        if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return false;
        settled = settle_locked(backends_[static_cast<std::size_t>(backend)], slots, now);
    }
    if (settled) notify();
    return settled;
}

bool registry::settle_locked(backend_state& b, const std::vector<observed_slot>& slots,
                             clock::time_point now) {
    if (b.unpinned_in_flight > 0) return false;
    const std::size_t unknown =
        b.floating_in_flight - std::min(b.floating_in_flight, settled_count(b));
    if (unknown == 0) return false;
    std::vector<std::size_t> planned;
    for (std::size_t i = 0; i < b.floating_slot.size(); ++i) {
        if (b.floating_slot[i] && !b.settled[i] && b.reserved_by[i] != 0) planned.push_back(i);
    }
    // A floating ticket without its reservation (dropped by a restart), or one whose request is
    // not sent yet: not every unknown request has a planned slot to be seen on.
    if (planned.size() != unknown) return false;
    const auto processing = [&](std::size_t i) {
        const auto& s = b.view.slots[i];
        // A slot whose answer ended a moment ago may still show that task processing.
        const bool tail = s.last_use != clock::time_point{} && now - s.last_use < own_tail;
        if (b.sent_at[i] == clock::time_point{} || tail) return false;
        return std::any_of(slots.begin(), slots.end(), [&](const observed_slot& o) {
            return o.id == static_cast<int>(i) && o.processing;
        });
    };
    if (!std::all_of(planned.begin(), planned.end(), processing)) return false;
    for (const auto i : planned) b.settled[i] = true;
    return true;
}

}  // namespace warmslot::routing
