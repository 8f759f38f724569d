// Shared by the config test files: a config that must be refused, and the checks of its error.
#pragma once

#include <doctest/doctest.h>

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

}  // namespace warmslot::test
