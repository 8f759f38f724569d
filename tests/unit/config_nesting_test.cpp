// A config file nested without bound, or whose anchors refer to themselves, is refused with a
// config_error like any other bad file: no stack overflow, no endless walk.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "config/config.hpp"

namespace cfg = warmslot::config;

namespace {

void check_refused(const std::string& yaml) {
    const cfg::env_lookup no_env = [](const std::string&) { return std::optional<std::string>(); };
    CHECK_THROWS_AS(cfg::parse(yaml, "test.yaml", no_env), cfg::config_error);
}

std::string block_mapping(int depth) {
    std::string yaml;
    for (int i = 0; i < depth; ++i) yaml += std::string(static_cast<std::size_t>(i), ' ') + "a:\n";
    return yaml;
}

}  // namespace

TEST_CASE("config: deeply nested YAML is refused, not a stack overflow") {
    constexpr std::size_t deep = 1'000'000;
    check_refused("backends: " + std::string(deep, '['));
    check_refused("backends: " + std::string(deep, '[') + std::string(deep, ']'));
    std::string maps = "limits: ";
    for (int i = 0; i < 100'000; ++i) maps += "{a: ";
    check_refused(maps);
    check_refused(block_mapping(3000));
    std::string sequences;
    for (int i = 0; i < 3000; ++i)
        sequences += std::string(static_cast<std::size_t>(i), ' ') + "-\n";
    check_refused(sequences);
}

TEST_CASE("config: self-referring anchors are refused") {
    check_refused("backends: &b [*b]\n");
    check_refused("backends:\n  - &b {name: a, url: 'http://127.0.0.1:1', command: *b}\n");
    check_refused("listen: &l [*l]\nbackends: [{url: 'http://127.0.0.1:1'}]\n");
    check_refused("rewrite: &r {models: {m: *r}}\nbackends: [{url: 'http://127.0.0.1:1'}]\n");
    check_refused("api_keys: &k [*k]\nbackends: [{url: 'http://127.0.0.1:1'}]\n");
}

TEST_CASE("config: a stray ',' where a document starts is refused, not an endless parse") {
    // yaml-cpp 0.7's LoadAll reports an empty document at such a ',' forever, eating memory.
    const cfg::env_lookup no_env = [](const std::string&) { return std::optional<std::string>(); };
    for (const std::string yaml : {",\n", "# header\n,\nbackends: []\n", "[a]\n,\n", "!!str\n,\n",
                                   "backends: [{url: 'http://127.0.0.1:1'}]\n---\n,\n"}) {
        CAPTURE(yaml);
        try {
            cfg::parse(yaml, "test.yaml", no_env);
            FAIL("accepted");
        } catch (const cfg::config_error& e) {
            CHECK(e.problem() == "invalid YAML: unexpected ','");
        }
    }
}
