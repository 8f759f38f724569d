// libFuzzer target: the YAML config reader (config/config.hpp). An operator writes the file, but
// a mistyped or truncated one must still end in config_error (one clear message at startup, the
// old config kept on a reload), never in a crash, a hang or another exception. Every variable
// the text names is set, so that ${NAME} values get as far as their checks.
//
//   build-asan/tests/fuzz/config_fuzz -dict=tests/fuzz/config.dict -max_len=1048576
//       build-asan/fuzz/corpus/config tests/fuzz/seeds/config
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const warmslot::config::env_lookup env =
        [](const std::string& name) -> std::optional<std::string> {
        if (name == "HOME") return "/home/fuzz";
        return "sk-fuzz-0123456789abcdef0123456789";
    };
    try {
        (void)warmslot::config::parse(text, "fuzz.yaml", env);
    } catch (const warmslot::config::config_error&) {
    }
    return 0;
}
