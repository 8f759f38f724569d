// tenants: what one tenant may take of warmslot at once. How the limits are kept is tested in
// tenant_limits_test.cpp.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using warmslot::test::bad_case;
using warmslot::test::one_backend;

namespace {

cfg::config parse(std::string_view yaml) { return warmslot::test::parse_with_fake_env(yaml); }

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

}  // namespace

TEST_CASE("config: tenants' limits are off by default, and counts when set") {
    const cfg::config none = parse(one_backend);
    CHECK(none.tenants.limits.concurrent_requests == 0);
    CHECK(none.tenants.limits.swaps_per_minute == 0);
    const cfg::config c = parse(std::string(one_backend) +
                                "tenants:\n  limits:\n    concurrent_requests: 4\n"
                                "    swaps_per_minute: 6\n");
    CHECK(c.tenants.limits.concurrent_requests == 4);
    CHECK(c.tenants.limits.swaps_per_minute == 6);
}

TEST_CASE("config: tenants' unknown keys name the keys it knows") {
    const std::string head = std::string(one_backend) + "tenants:\n";  // tenants: is line 4
    const bad_case cases[] = {
        {head + "  limit:\n    concurrent_requests: 1\n", "tenants.limit", 5,
         "unknown key; expected one of: limits"},
        {head + "  limits:\n    requests: 1\n", "tenants.limits.requests", 6,
         "unknown key; expected one of: concurrent_requests, swaps_per_minute"},
        {head + "  limits:\n    concurrent_requests: -1\n", "tenants.limits.concurrent_requests", 6,
         "whole number from 0 to 100000"},
        {head + "  limits:\n    swaps_per_minute: 10001\n", "tenants.limits.swaps_per_minute", 6,
         "whole number from 0 to 10000"},
        {head + "  limits: [1]\n", "tenants.limits", 5, "expected a map, found a list"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}
