// `warmslot status`: the status JSON (status.hpp) as terminal tables. Pure.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace warmslot::status {

// Backends, slots, the disk tier, totals and the last `requests` requests. Columns are aligned
// with spaces; missing fields show as "-". Never throws on a well-formed JSON object of another
// version: unknown shapes show as "-".
std::string format_status(const nlohmann::json& status, std::size_t requests);

// "7.8 MB", "512 B": sizes in decimal units, as df -H prints them.
std::string human_bytes(double bytes);
// "12s", "4m", "3h", "2d": how long ago.
std::string human_ago(double seconds);

}  // namespace warmslot::status
