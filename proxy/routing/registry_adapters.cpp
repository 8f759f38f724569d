// The registry's marks of slots whose KV a request with its own adapters computed: see
// registry.hpp (mark_adapter). Kept apart from the slot beliefs: a belief says which prompt a
// slot holds, a mark says that its KV is not the base model's for that prompt.
#include "routing/registry.hpp"

namespace warmslot::routing {

void registry::mark_adapter(int backend, std::optional<int> slot) {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return;
    if (slot) {
        adapter_kv_.emplace(backend, *slot);
        return;
    }
    for (const auto& s : backends_[static_cast<std::size_t>(backend)].view.slots) {
        adapter_kv_.emplace(backend, s.id);
    }
}

bool registry::take_adapter(int backend, int slot) {
    std::lock_guard lock(mu_);
    return adapter_kv_.erase({backend, slot}) > 0;
}

std::optional<ticket> registry::reserve_marked_idle(int backend) {
    std::lock_guard lock(mu_);
    if (backend < 0 || static_cast<std::size_t>(backend) >= backends_.size()) return std::nullopt;
    auto& b = backends_[static_cast<std::size_t>(backend)];
    if (slots_unknown(b)) return std::nullopt;
    for (auto it = adapter_kv_.lower_bound({backend, 0});
         it != adapter_kv_.end() && it->first == backend; ++it) {
        auto* s = slot_of(b, it->second);
        const auto i = static_cast<std::size_t>(it->second);
        if (!s || b.reserved_by[i] != 0 || b.outside_busy[i] || s->busy) continue;
        ticket t;
        t.id = next_ticket_++;
        t.p.backend = backend;
        t.p.slot = it->second;
        t.p.why = route::scratch;
        b.reserved_by[i] = t.id;
        s->busy = true;
        ++b.view.in_flight;
        return t;
    }
    return std::nullopt;
}

}  // namespace warmslot::routing
