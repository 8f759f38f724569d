// libFuzzer target: the prompt statistics read from a backend's answer (api/timings.hpp), on a
// whole response body and on an SSE data payload alike. No input may crash or throw, and the
// cheap pre-check may only skip texts that carry no statistics: the relay reads an SSE payload
// only when may_carry_stats says it can (service/relay.cpp).
//
//   build-asan/tests/fuzz/timings_fuzz -max_len=1048576
//       build-asan/fuzz/corpus/timings tests/fuzz/seeds/timings
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/timings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const bool may = warmslot::api::may_carry_stats(text);
    const auto stats = warmslot::api::find_prompt_stats(text);
    if (stats && !may) std::abort();
    return 0;
}
