// Windows implementation of sd_notify.hpp: there is no systemd, so nothing is ever sent (the
// service control handler reports status to the SCM instead, service_windows.cpp).
#include <chrono>

#include "app/sd_notify.hpp"

namespace warmslot::app::sd_notify {

result notify(std::string_view) { return {}; }
result ready(std::string_view) { return {}; }
result reloading(std::string_view) { return {}; }
result stopping(std::string_view) { return {}; }
result status(std::string_view) { return {}; }

std::uint64_t monotonic_usec() {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(now).count());
}

}  // namespace warmslot::app::sd_notify
