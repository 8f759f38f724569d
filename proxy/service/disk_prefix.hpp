// The stable prefix of one request, as the disk tier handles it. Internal to service/disk_*.
#pragma once

#include <nlohmann/json.hpp>

#include "service/disk_tier.hpp"

namespace warmslot::service {

struct disk_tier::prefix {
    std::string key;                          // content address: identity + fingerprint
    std::vector<routing::prefix_level> levels;
    nlohmann::json messages;                  // the stable messages
    const nlohmann::json* body = nullptr;     // the whole request (lives during prepare)
};

}  // namespace warmslot::service
