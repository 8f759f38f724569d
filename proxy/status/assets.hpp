// The dashboard's files (proxy/status/assets/), built into the binary by cmake/embed_assets.cmake.
// Immutable: safe from any thread.
#pragma once

#include <optional>
#include <span>
#include <string_view>

namespace warmslot::status {

struct asset {
    std::string_view name;  // file name, e.g. "index.html"
    std::string_view body;
};

std::span<const asset> assets() noexcept;

// The asset named `name`, if any, and the Content-Type it is served with.
struct found_asset {
    std::string_view body;
    std::string_view content_type;
};
std::optional<found_asset> find_asset(std::string_view name) noexcept;

}  // namespace warmslot::status
