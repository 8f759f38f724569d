#include "util/secrets.hpp"

namespace warmslot::util {
namespace {

// Compares over max(len) bytes whatever the contents; lengths are not secret enough to hide.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
    const std::size_t n = a.size() > b.size() ? a.size() : b.size();
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (std::size_t i = 0; i < n; ++i) {
        const auto x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
        const auto y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
        diff |= x ^ y;
    }
    return diff == 0;
}

}  // namespace

bool matches_any_key(std::string_view given, const std::vector<std::string>& keys) noexcept {
    return matching_key(given, keys) < keys.size();
}

std::size_t matching_key(std::string_view given, const std::vector<std::string>& keys) noexcept {
    std::size_t found = keys.size();
    for (std::size_t i = 0; i < keys.size(); ++i) {
        const bool same = constant_time_equal(given, keys[i]);  // every key compared in full
        found = same && found == keys.size() ? i : found;
    }
    return found;
}

}  // namespace warmslot::util
