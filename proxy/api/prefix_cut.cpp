#include "api/prefix_cut.hpp"

namespace warmslot::api {

std::optional<std::size_t> stable_text_end(std::string_view one, std::string_view two,
                                           std::string_view marker) {
    if (marker.empty()) return std::nullopt;
    const auto at = one.rfind(marker);
    const auto second = two.rfind(marker);
    if (at == std::string_view::npos || second == std::string_view::npos || second == 0) {
        return std::nullopt;
    }
    const auto first = two.rfind(marker, second - 1);
    if (first == std::string_view::npos || first + marker.size() > second) return std::nullopt;
    const std::string_view before = one.substr(0, at);
    if (two.substr(0, first) != before) return std::nullopt;
    const std::string_view between =
        two.substr(first + marker.size(), second - first - marker.size());
    std::size_t shared = 0;
    while (shared < before.size() && shared < between.size() &&
           before[before.size() - 1 - shared] == between[between.size() - 1 - shared]) {
        ++shared;
    }
    if (shared == 0 || shared >= before.size()) return std::nullopt;
    return before.size() - shared;
}

}  // namespace warmslot::api
