#include "status/assets.hpp"

namespace warmslot::status {
namespace {

std::string_view content_type(std::string_view name) noexcept {
    if (name.ends_with(".html")) return "text/html; charset=utf-8";
    if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
    if (name.ends_with(".css")) return "text/css; charset=utf-8";
    if (name.ends_with(".svg")) return "image/svg+xml";
    return "application/octet-stream";
}

}  // namespace

std::optional<found_asset> find_asset(std::string_view name) noexcept {
    for (const auto& a : assets()) {
        if (a.name == name) return found_asset{a.body, content_type(a.name)};
    }
    return std::nullopt;
}

}  // namespace warmslot::status
