// swap_groups: command backends that share a device.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using std::chrono::milliseconds;

namespace {

cfg::config parse(std::string_view yaml) {
    return cfg::parse(yaml, "test.yaml", [](const std::string& name) -> std::optional<std::string> {
        if (name == "HOME") return std::string("/home/u");
        return std::nullopt;
    });
}

// Three command backends and one url backend; lines 1-9.
const std::string three =
    "backends:\n"
    "  - name: coder\n"
    "    command: [llama-server, -m, /m/coder.gguf]\n"
    "  - name: chat\n"
    "    command: [llama-server, -m, /m/chat.gguf]\n"
    "  - name: embed\n"
    "    command: [llama-server, -m, /m/embed.gguf]\n"
    "  - name: remote\n"
    "    url: http://10.0.0.2:8081\n";

}  // namespace

TEST_CASE("config: a swap group gets its defaults") {
    const auto c = parse(three + "swap_groups:\n  - name: gpu0\n    backends: [coder, chat]\n");
    REQUIRE(c.swap_groups.size() == 1);
    const auto& g = c.swap_groups[0];
    CHECK(g.name == "gpu0");
    CHECK(g.backends == std::vector<std::string>{"coder", "chat"});
    CHECK(g.max_running == 1);
    CHECK(g.min_residency == milliseconds{30'000});
    CHECK(g.home.empty());
    CHECK(g.home_after == milliseconds{300'000});
    CHECK(g.allow.empty());
    CHECK(g.drain_grace == milliseconds{60'000});
}

TEST_CASE("config: a swap group lists the sets of members that may run together") {
    const auto c = parse(three +
                         "swap_groups:\n"
                         "  - name: gpu0\n"
                         "    backends: [coder, chat, embed]\n"
                         "    allow: [[coder, embed], [chat, embed], [embed]]\n"
                         "    drain_grace: 0s\n");
    REQUIRE(c.swap_groups.size() == 1);
    const auto& g = c.swap_groups[0];
    CHECK(g.allow ==
          std::vector<std::vector<std::string>>{{"coder", "embed"}, {"chat", "embed"}, {"embed"}});
    CHECK(g.max_running == 2);  // the largest set
    CHECK(g.drain_grace == milliseconds{0});
}

TEST_CASE("config: every swap group key set") {
    const auto c = parse(three +
                         "swap_groups:\n"
                         "  - name: gpu0\n"
                         "    backends: [coder, chat, embed]\n"
                         "    max_running: 2\n"
                         "    min_residency: 0s\n"
                         "    home: chat\n"
                         "    home_after: 90s\n");
    REQUIRE(c.swap_groups.size() == 1);
    const auto& g = c.swap_groups[0];
    CHECK(g.max_running == 2);
    CHECK(g.min_residency == milliseconds{0});
    CHECK(g.home == "chat");
    CHECK(g.home_after == milliseconds{90'000});
}

TEST_CASE("config: no swap_groups, or an empty section, is no group") {
    CHECK(parse(three).swap_groups.empty());
    CHECK(parse(three + "swap_groups:\n").swap_groups.empty());
}

TEST_CASE("config: swap groups are validated") {
    const std::string head = three + "swap_groups:\n  - name: gpu0\n";  // group at line 11
    const warmslot::test::bad_case cases[] = {
        {three + "swap_groups: {a: 1}\n", "swap_groups", 10, "expected a list of groups"},
        {three + "swap_groups:\n  - backends: [coder, chat]\n", "swap_groups[0].name", 11,
         "is required"},
        {three + "swap_groups:\n  - name: a b\n    backends: [coder, chat]\n",
         "swap_groups[0].name", 11, "must be 1 to 64 characters"},
        {head, "swap_groups[0].backends", 11, "is required"},
        {head + "    backends: [coder]\n", "swap_groups[0].backends", 12, "at least two"},
        {head + "    backends: coder\n", "swap_groups[0].backends", 12,
         "expected a list of backend names"},
        {head + "    backends: [coder, coder]\n", "swap_groups[0].backends[1]", 12, "listed twice"},
        {head + "    backends: [coder, nope]\n", "swap_groups[0].backends[1]", 12,
         "no backend is named \"nope\""},
        {head + "    backends: [coder, remote]\n", "swap_groups[0].backends[1]", 12,
         "only command backends"},
        {head + "    backends: [coder, chat]\n    max_running: 2\n", "swap_groups[0].max_running",
         13, "must be below the number of backends in the group (2)"},
        {head + "    backends: [coder, chat]\n    max_running: 0\n", "swap_groups[0].max_running",
         13, "from 1 to 64"},
        {head + "    backends: [coder, chat]\n    home: embed\n", "swap_groups[0].home", 13,
         "is not one of this group's backends"},
        {head + "    backends: [coder, chat]\n    min_residency: -1s\n",
         "swap_groups[0].min_residency", 13, ""},
        {head + "    backends: [coder, chat]\n    home_after: 0s\n", "swap_groups[0].home_after",
         13, "must be greater than 0"},
        {head + "    backends: [coder, chat]\n    swap: yes\n", "swap_groups[0].swap", 13,
         "unknown key"},
        {head + "    backends: [coder, chat]\n  - name: gpu0\n    backends: [embed, chat]\n",
         "swap_groups[1].name", 13, "duplicate group name"},
        {head + "    backends: [coder, chat]\n  - name: gpu1\n    backends: [embed, chat]\n",
         "swap_groups[1].backends", 13, "\"chat\" is already in group \"gpu0\""},
        {head + "    backends: [coder, chat]\n    drain_grace: soon\n",
         "swap_groups[0].drain_grace", 13, ""},
        {head + "    backends: [coder, chat]\n    allow: [coder, chat]\n",
         "swap_groups[0].allow[0]", 13, "expected a list of backend names that may run together"},
        {head + "    backends: [coder, chat]\n    allow: []\n", "swap_groups[0].allow", 13,
         "expected a list of sets"},
        {head + "    backends: [coder, chat]\n    allow: [[coder], []]\n",
         "swap_groups[0].allow[1]", 13, "found an empty list"},
        {head + "    backends: [coder, chat]\n    allow:\n      - [coder]\n      - [chat, nope]\n",
         "swap_groups[0].allow[1][1]", 15, "\"nope\" is not one of this group's backends"},
        {head + "    backends: [coder, chat]\n    allow: [[coder, coder], [chat]]\n",
         "swap_groups[0].allow[0][1]", 13, "listed twice"},
        {head + "    backends: [coder, chat, embed]\n    allow: [[coder, chat]]\n",
         "swap_groups[0].allow", 13, "backend \"embed\" is in no set"},
        {head + "    backends: [coder, chat]\n    allow: [[coder, chat]]\n",
         "swap_groups[0].allow[0]", 13, "holds every backend of the group"},
        {head + "    backends: [coder, chat, embed]\n    max_running: 1\n"
                "    allow: [[coder], [chat], [embed]]\n",
         "swap_groups[0].max_running", 13, "give max_running or allow, not both"},
        {"backends:\n  - name: a\n    command: [s]\n    start: on_demand\n  - name: b\n"
         "    command: [s]\nswap_groups:\n  - name: g\n    backends: [a, b]\n",
         "backends[0].start", 4, "remove start"},
    };
    for (const auto& c : cases) {
        warmslot::test::check_rejected(c, [](std::string_view y) { parse(y); });
    }
}

TEST_CASE("config: swap groups may come before the backends in the file") {
    const auto c = parse(
        "swap_groups:\n  - name: g\n    backends: [a, b]\n"
        "backends:\n  - name: a\n    command: [s]\n  - name: b\n"
        "    command: [s]\n");
    REQUIRE(c.swap_groups.size() == 1);
    CHECK(c.swap_groups[0].backends == std::vector<std::string>{"a", "b"});
}
