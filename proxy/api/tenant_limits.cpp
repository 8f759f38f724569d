#include "api/tenant_limits.hpp"

#include <utility>

namespace warmslot::api {

tenant_limits::place::place(place&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), tenant_(std::move(other.tenant_)) {}

tenant_limits::place::~place() {
    if (owner_) owner_->leave(tenant_);
}

std::optional<tenant_limits::place> tenant_limits::enter(const std::string& tenant,
                                                         std::size_t max) {
    const std::lock_guard lock(mu_);
    auto& n = in_flight_[tenant];
    if (max > 0 && n >= max) return std::nullopt;
    ++n;
    return place(this, tenant);
}

std::size_t tenant_limits::in_flight(const std::string& tenant) const {
    const std::lock_guard lock(mu_);
    const auto it = in_flight_.find(tenant);
    return it == in_flight_.end() ? 0 : it->second;
}

void tenant_limits::leave(const std::string& tenant) {
    const std::lock_guard lock(mu_);
    const auto it = in_flight_.find(tenant);
    if (it == in_flight_.end()) return;
    if (--it->second == 0) in_flight_.erase(it);
}

std::optional<tenant_limits::clock::duration> tenant_limits::take_swap(const std::string& tenant,
                                                                       std::size_t per_minute,
                                                                       clock::time_point now) {
    constexpr auto window = std::chrono::minutes(1);
    if (per_minute == 0) return std::nullopt;
    const std::lock_guard lock(mu_);
    auto& times = swaps_[tenant];
    while (!times.empty() && now - times.front() >= window) times.pop_front();
    if (times.size() >= per_minute) return times.front() + window - now;
    times.push_back(now);
    return std::nullopt;
}

}  // namespace warmslot::api
