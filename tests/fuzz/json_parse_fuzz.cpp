// libFuzzer target: on every input, parse_json returns exactly what nlohmann::json::parse does
// (the same DOM, or a discarded value for both). See tests/CMakeLists.txt (WARMSLOT_FUZZ).
//
//   build-fuzz/tests/json_parse_fuzz -dict=tests/fuzz/json.dict -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "api/json_parse.hpp"
#include "json_same.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto expected = nlohmann::json::parse(text, nullptr, false);
    if (!json_same(warmslot::api::parse_json(text), expected)) std::abort();
    return 0;
}
