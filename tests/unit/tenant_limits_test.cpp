// Per-tenant limits: requests in flight and swaps per minute.
#include "api/tenant_limits.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <vector>

using warmslot::api::tenant_limits;
using namespace std::chrono_literals;

TEST_CASE(
    "tenant limits: a tenant holds at most its limit in flight; others are not counted against "
    "it") {
    tenant_limits limits;
    std::vector<tenant_limits::place> a;
    for (int i = 0; i < 2; ++i) {
        auto p = limits.enter("a", 2);
        REQUIRE(p);
        a.push_back(std::move(*p));
    }
    CHECK(limits.in_flight("a") == 2);
    CHECK_FALSE(limits.enter("a", 2));
    CHECK(limits.in_flight("a") == 2);  // a refusal takes nothing
    {
        const auto b = limits.enter("b", 2);  // another tenant has its own count
        CHECK(b);
        CHECK(limits.in_flight("b") == 1);
    }
    CHECK(limits.in_flight("b") == 0);
    a.pop_back();  // a request ends: its place is free again
    CHECK(limits.in_flight("a") == 1);
    CHECK(limits.enter("a", 2));
    CHECK(limits.in_flight("a") == 1);  // that place ended with the expression
}

TEST_CASE("tenant limits: 0 is no limit, and still counts") {
    tenant_limits limits;
    std::vector<tenant_limits::place> held;
    for (int i = 0; i < 100; ++i) held.push_back(*limits.enter("", 0));
    CHECK(limits.in_flight("") == 100);
    held.clear();
    CHECK(limits.in_flight("") == 0);
}

TEST_CASE("tenant limits: swaps per minute in a sliding window, per tenant") {
    tenant_limits limits;
    const auto t0 = tenant_limits::clock::time_point{} + 1h;
    CHECK_FALSE(limits.take_swap("a", 2, t0));
    CHECK_FALSE(limits.take_swap("a", 2, t0 + 10s));
    const auto wait = limits.take_swap("a", 2, t0 + 20s);
    REQUIRE(wait);
    CHECK(*wait == 40s);                              // until the first falls out of the minute
    CHECK_FALSE(limits.take_swap("b", 2, t0 + 20s));  // b is not charged for a's swaps
    CHECK(limits.take_swap("a", 2, t0 + 59s));
    CHECK_FALSE(limits.take_swap("a", 2, t0 + 60s));  // the first is a minute old
    CHECK(limits.take_swap("a", 2, t0 + 61s));
    for (int i = 0; i < 1000; ++i) CHECK_FALSE(limits.take_swap("c", 0, t0));  // no limit
}
