// What each tenant holds of warmslot right now, against its limits (config tenants.limits):
// model API requests in flight, and the swap group members its requests made warmslot start
// within the last minute.
//
// Thread-safe (one mutex; every call is a few map operations). Tenants come from the config,
// so the maps stay as small as the list of tenants.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace warmslot::api {

class tenant_limits {
  public:
    using clock = std::chrono::steady_clock;

    // One request in flight of one tenant, counted until it is destroyed. Move-only.
    class place {
      public:
        place(place&& other) noexcept;
        place& operator=(place&&) = delete;
        place(const place&) = delete;
        ~place();

      private:
        friend class tenant_limits;
        place(tenant_limits* owner, std::string tenant)
            : owner_(owner), tenant_(std::move(tenant)) {}
        tenant_limits* owner_;
        std::string tenant_;
    };

    // A place among `tenant`'s requests in flight, or std::nullopt when it holds `max` of them
    // already. `max` 0: no limit (the request is still counted).
    std::optional<place> enter(const std::string& tenant, std::size_t max);
    std::size_t in_flight(const std::string& tenant) const;

    // Whether `tenant` may start a swap now: fewer than `per_minute` in the 60 s before `now`
    // (`per_minute` 0: always). When it may, the start is counted; when it may not, the time
    // until it may.
    std::optional<clock::duration> take_swap(const std::string& tenant, std::size_t per_minute,
                                             clock::time_point now);

  private:
    void leave(const std::string& tenant);

    mutable std::mutex mu_;
    std::map<std::string, std::size_t> in_flight_;                // tenants with requests
    std::map<std::string, std::deque<clock::time_point>> swaps_;  // within the last minute
};

}  // namespace warmslot::api
