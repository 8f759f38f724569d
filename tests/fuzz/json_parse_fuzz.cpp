// libFuzzer target: on every input, parse_json returns exactly what nlohmann::json::parse does
// (the same DOM, or a discarded value for both), except that a document nested deeper than
// max_json_depth is discarded. See docs/testing.md.
//
//   build-asan/tests/json_parse_fuzz -dict=tests/fuzz/json_parse.dict -max_total_time=300
//       build-asan/fuzz/corpus/json_parse tests/fuzz/seeds/json_parse
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/json_parse.hpp"
#include "json_same.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto got = warmslot::api::parse_json(text);
    const auto expected = nlohmann::json::parse(text, nullptr, false);
    if (json_same(got, expected)) return 0;
    // The only allowed difference: a valid document refused for its depth, measured here by a
    // scan of our own rather than the parser's, so that the oracle does not share its bugs.
    if (!got.is_discarded() || expected.is_discarded()) std::abort();
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    if (deepest <= warmslot::api::max_json_depth) std::abort();
    return 0;
}
