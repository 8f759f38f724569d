// GET /warmslot/status: one JSON picture of what warmslot knows (backends and their slots, the
// disk tier, counters, the charts' time series, the last requests). Pure: the I/O layer gathers
// the inputs (registry, disk index on its own thread, activity) and this builds the document,
// so the shape is tested without sockets. The dashboard page and `warmslot status` read it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "config/config.hpp"
#include "routing/registry.hpp"
#include "status/activity.hpp"

namespace warmslot::status {

// Characters of prompt text kept per slot (dashboard.previews).
inline constexpr std::size_t preview_chars = 60;

// One slot directory of the disk tier and the files its index lists.
struct disk_dir {
    std::string dir;
    std::vector<std::string> backends;  // names of the backends that save there
    std::uint64_t budget = 0;           // cache.max_disk
    std::vector<cache::snapshot> files;
};

struct status_input {
    const config::config* cfg = nullptr;
    std::vector<routing::backend_view> views;                 // by backend index
    std::vector<std::optional<routing::backend_info>> infos;  // by backend index
    std::vector<bool> asleep;  // by backend index: its model is not loaded (registry::asleep)
    // By backend index: requests waiting in warmslot for one of its slots (service/hold.cpp);
    // counted in the backend's in_flight too.
    std::vector<std::size_t> held;
    routing::counters totals;
    std::vector<disk_dir> disk;
    activity_view activity;
    std::int64_t now_ms = 0;           // unix milliseconds
    routing::clock::time_point now{};  // for the slots' last use
    std::string version;
    // Non-null: the status a client or observer of this tenant sees: the disk files its
    // tenant's requests wrote, without their keys and file names (a key is a hash of the
    // backend identity and a prefix: a guess could be tested against it), and the token counts
    // of the slots its tenant's requests filled only. Null: everything (an admin).
    const std::string* tenant = nullptr;
};

nlohmann::json build_status(const status_input& in);

// Why a backend is passed through without routing, with what fixes it; "" when it is routed.
std::string pass_through_reason(const config::config& cfg, const routing::backend_view& v,
                                const std::optional<routing::backend_info>& info);

// What a request body would show as its slot's preview: the system prompt, else the first
// user message, else the completion prompt (text parts only). "" when it has none.
std::string body_preview(const nlohmann::json& body);

}  // namespace warmslot::status
