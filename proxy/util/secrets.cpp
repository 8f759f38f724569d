#include "util/secrets.hpp"

namespace warmslot::util {
namespace {

// Compares over max(len) bytes whatever the contents; lengths are not secret enough to hide.
// Two loops without a branch on the contents or a bound check per byte: the common length
// (which the compiler vectorises), then the rest of the longer one against zero.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
    const std::string_view& longer = a.size() >= b.size() ? a : b;
    const std::size_t common = a.size() < b.size() ? a.size() : b.size();
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (std::size_t i = 0; i < common; ++i) {
        diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
    }
    for (std::size_t i = common; i < longer.size(); ++i) {
        diff |= static_cast<unsigned char>(longer[i]);
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
