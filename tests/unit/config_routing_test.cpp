// routing: how requests are placed on backends and slots, and the backends' model names.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

TEST_CASE("config: routing settings and backend model names") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const auto c = warmslot::config::parse(
        "backends:\n"
        "  - name: a\n"
        "    url: http://127.0.0.1:9000\n"
        "    models: [qwen3-8b, default]\n"
        "routing:\n"
        "  enabled: false\n"
        "  short_request_tokens: 200\n"
        "  long_segment_tokens: 64\n"
        "  scratch_slot: false\n"
        "  max_wait: 30s\n"
        "  reconcile_interval: 250ms\n",
        "test.yaml", env);
    CHECK(c.backends[0].models == std::vector<std::string>{"qwen3-8b", "default"});
    CHECK_FALSE(c.routing.enabled);
    CHECK(c.routing.short_request_tokens == 200);
    CHECK(c.routing.long_segment_tokens == 64);
    CHECK_FALSE(c.routing.scratch_slot);
    CHECK(c.routing.max_wait == std::chrono::seconds(30));
    CHECK(c.routing.reconcile_interval == std::chrono::milliseconds(250));

    const auto defaults = warmslot::config::parse(
        "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n", "test.yaml", env);
    CHECK(defaults.routing.enabled);
    CHECK(defaults.routing.short_request_tokens == 1000);
    CHECK(defaults.routing.reconcile_interval == std::chrono::seconds(1));

    struct bad_case {
        const char* yaml;
        const char* path;
        int line;
    };
    for (const auto& b :
         {bad_case{"routing:\n  enabled: maybe\n", "routing.enabled", 6},
          bad_case{"routing:\n  max_wait: 10\n", "routing.max_wait", 6},
          bad_case{"routing:\n  scrach_slot: true\n", "routing.scrach_slot", 6},
          bad_case{"routing:\n  long_segment_tokens: 0\n", "routing.long_segment_tokens", 6}}) {
        const std::string yaml =
            std::string("backends:\n  - name: a\n    url: http://127.0.0.1:9000\n\n") + b.yaml;
        try {
            warmslot::config::parse(yaml, "test.yaml", env);
            FAIL("accepted: " << b.yaml);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == b.path);
            CHECK(e.line() == b.line);
        }
    }
    try {
        warmslot::config::parse(
            "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n    models: qwen\n",
            "test.yaml", env);
        FAIL("a scalar models was accepted");
    } catch (const warmslot::config::config_error& e) {
        CHECK(e.key_path() == "backends[0].models");
        CHECK(e.line() == 4);
    }
}
