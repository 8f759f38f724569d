// libFuzzer target: the classification of a request line (api/endpoints.hpp). The input is a
// method and a target separated by the first space. No input may crash, and:
// - path_of returns the target's leading part, up to the first '?' or '#';
// - the query and fragment never change the classification.
//
//   build-asan/tests/fuzz/endpoints_fuzz -max_len=65536
//       build-asan/fuzz/corpus/endpoints tests/fuzz/seeds/endpoints
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/endpoints.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto space = text.find(' ');
    const auto method = text.substr(0, space);
    const auto target =
        space == std::string_view::npos ? std::string_view() : text.substr(space + 1);

    const auto path = warmslot::api::path_of(target);
    check(path.data() == target.data());
    check(path.size() == std::min(target.find_first_of("?#"), target.size()));

    const auto ep = warmslot::api::classify(method, target);
    const auto bare = warmslot::api::classify(method, path);
    check(ep.kind == bare.kind && ep.needs_auth == bare.needs_auth && ep.shape == bare.shape &&
          ep.dialect == bare.dialect);
    check(!warmslot::api::name(ep.shape).empty());
    return 0;
}
