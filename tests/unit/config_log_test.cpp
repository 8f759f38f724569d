// log and dashboard: what warmslot shows of itself.
#include <doctest/doctest.h>

#include <string_view>

#include "config/config.hpp"
#include "config_fixtures.hpp"

using warmslot::test::bad_case;

namespace {

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

}  // namespace

TEST_CASE("config: log is validated") {
    const bad_case cases[] = {
        {"log:\n  level: verbose\n", "log.level", 2, "unknown level \"verbose\""},
        {"log:\n  level: INFO\n", "log.level", 2, "unknown level"},
        {"log:\n  access: abc\n", "log.access", 2, "expected true or false, found \"abc\""},
        {"log:\n  access: yes\n", "log.access", 2, "expected true or false"},
        {"log:\n  access: 1\n", "log.access", 2, "expected true or false"},
        {"log:\n  access: [true]\n", "log.access", 2, "found a list"},
        {"dashboard:\n  previews: no\n", "dashboard.previews", 2, "expected true or false"},
        {"dashboard:\n  preview: false\n", "dashboard.preview", 2, "unknown key"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}
