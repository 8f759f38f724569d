// Shared by the config test files: a config that must be refused and the checks of its error,
// and a test environment whose secrets no error message may show.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace warmslot::test {

struct bad_case {
    std::string yaml;
    std::string_view path;     // expected key path ("" for the whole document)
    int line;                  // expected 1-based line
    std::string_view problem;  // a fragment of the problem text
};

// Parses `c.yaml` with `parse` (which names the file "test.yaml") and checks that it is refused
// as `c` says: key path, line, problem, and the "test.yaml:LINE: " start of the message.
// Returns the message ("" when the config was accepted, which fails the test).
template <typename Parse>
std::string check_rejected(const bad_case& c, Parse&& parse) {
    CAPTURE(c.yaml);
    try {
        parse(c.yaml);
        FAIL("accepted a bad config");
    } catch (const config::config_error& e) {
        CAPTURE(e.what());
        CHECK(e.key_path() == c.path);
        CHECK(e.line() == c.line);
        CHECK(e.problem().find(c.problem) != std::string::npos);
        const std::string prefix = "test.yaml:" + std::to_string(c.line) + ": ";
        CHECK(std::string_view(e.what()).starts_with(prefix));
        return e.what();
    }
    return "";
}

// A config of one url backend; lines 1-3, so a section that follows starts on line 4.
inline constexpr std::string_view one_backend =
    "backends:\n"
    "  - name: a\n"
    "    url: http://127.0.0.1:8081\n";

// Secrets a test environment knows; none of these may ever show up in an error message.
inline const std::map<std::string, std::string>& fake_vars() {
    static const std::map<std::string, std::string> vars{
        {"WS_KEY", "sk-live-0123456789"}, {"WS_KEY2", "sk-live-abcdefghij"}, {"WS_EMPTY", ""},
        {"WS_SHORT", "tiny7ch"},          {"WS_SPACE", "has a space in it"},
    };
    return vars;
}

inline config::env_lookup fake_env() {
    return [](const std::string& name) -> std::optional<std::string> {
        const auto it = fake_vars().find(name);
        if (it == fake_vars().end()) return std::nullopt;
        return it->second;
    };
}

// Parses `yaml` as "test.yaml" under fake_env().
inline config::config parse_with_fake_env(std::string_view yaml) {
    return config::parse(yaml, "test.yaml", fake_env());
}

inline bool contains(std::string_view text, std::string_view part) {
    return text.find(part) != std::string_view::npos;
}

// Refused under fake_env() as `c` says, and no secret of the environment in the message.
inline void check_rejected_keeping_secrets(const bad_case& c) {
    const std::string message =
        check_rejected(c, [](std::string_view y) { parse_with_fake_env(y); });
    for (const auto& [name, value] : fake_vars()) {
        if (!value.empty()) CHECK_FALSE(contains(message, value));
    }
}

}  // namespace warmslot::test
