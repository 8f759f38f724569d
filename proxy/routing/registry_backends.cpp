// The registry's view of each backend as the monitor reports it: the process behind it
// (set_info, info), its health and its supervised state, what GET /slots shows of its slots
// (reconcile) and warmslot's own work on them, for status. See registry.hpp.
#include <algorithm>

#include "routing/registry.hpp"

namespace warmslot::routing {

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
        if (b.view.healthy) b.returning = false;
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

bool registry::any_ready(std::size_t backends) const {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < backends && i < backends_.size(); ++i) {
        const auto& b = backends_[i];
        if (b.view.healthy && b.checks_done >= b.trusted_after) return true;
    }
    return false;
}

void registry::set_returning(int backend, bool returning) {
    {
        std::lock_guard lock(mu_);
        backends_[static_cast<std::size_t>(backend)].returning = returning;
    }
    notify();
}

bool registry::any_returning(std::size_t backends) const {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < backends && i < backends_.size(); ++i) {
        const auto& b = backends_[i];
        if (b.retired || b.foreign) continue;
        if (b.returning || (b.view.healthy && b.checks_done < b.trusted_after)) return true;
    }
    return false;
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
        const auto diff =
            tokens > s->held_tokens ? tokens - s->held_tokens : s->held_tokens - tokens;
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
