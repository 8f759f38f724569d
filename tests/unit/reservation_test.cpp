// Reservations as leases: every ticket ends exactly once, whatever ends its owner (an exception,
// a restart of the backend with another build under a running request), and the registry's
// gauges of open tickets and reserved slots come back to 0.
#include "routing/reservation.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace routing = warmslot::routing;
using nlohmann::json;

namespace {

routing::backend_info info_of(const std::string& build, int slots) {
    routing::backend_info info;
    info.total_slots = slots;
    info.model_path = "m.gguf";
    info.build_info = build;
    return info;
}

void make_ready(routing::registry& reg, int slots) {
    reg.set_info(0, info_of("b1", slots), true);
    reg.set_healthy(0, true);
    reg.check_started(0);
    reg.check_done(0);
}

routing::fingerprint document(char fill) {
    const json body = {{"messages",
                        {{{"role", "system"}, {"content", std::string(6000, fill)}},
                         {{"role", "user"}, {"content", "q"}}}}};
    return *routing::fingerprint_request(routing::request_kind::chat, body);
}

bool idle(const routing::registry& reg) {
    const auto c = reg.totals();
    return c.in_flight == 0 && c.reserved_slots == 0;
}

}  // namespace

TEST_CASE("reservation: an exception in its owner cancels it; the slot is planned again") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1);
    const auto fp = document('a');
    const auto now = routing::clock::now();
    try {
        routing::reservation t(reg, reg.reserve(&fp, "", fp.total_bytes, now));
        REQUIRE(t->p.slot == 0);
        CHECK(reg.totals().reserved_slots == 1);
        throw std::runtime_error("index: database or disk is full");
    } catch (const std::runtime_error&) {
    }
    CHECK(idle(reg));
    const routing::reservation again(reg, reg.reserve(&fp, "", fp.total_bytes, now));
    CHECK(again->p.slot == 0);  // pinned again: the only slot is not held by a leaked ticket
}

TEST_CASE("reservation: ends once; end() keeps the belief until sent(), forgets it after") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1);
    const auto fp = document('a');
    const auto now = routing::clock::now();
    {
        routing::reservation t(reg, reg.reserve(&fp, "", fp.total_bytes, now));
        reg.set_held(*t, fp.levels, 1500);
        t.end();     // nothing sent: the slot still holds what the belief says
        t.cancel();  // a second end does nothing
        CHECK(idle(reg));
    }
    CHECK(reg.snapshot()[0].slots[0].held.size() == fp.levels.size());
    {
        routing::reservation t(reg, reg.reserve(&fp, "", fp.total_bytes, now));
        t.sent();
        t.end();  // the request may have reached the slot: what it holds is unknown
    }
    CHECK(reg.snapshot()[0].slots[0].held.empty());
    CHECK(idle(reg));
}

TEST_CASE("reservation: moving hands over, assigning ends the one held first") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 2);
    const auto a = document('a');
    const auto now = routing::clock::now();
    routing::reservation t(reg, reg.reserve(&a, "", a.total_bytes, now));
    routing::reservation moved(std::move(t));
    CHECK_FALSE(t.open());
    CHECK(moved.open());
    CHECK(reg.totals().in_flight == 1);
    moved = routing::reservation(reg, reg.reserve(&a, "", a.total_bytes, now));
    CHECK(reg.totals().in_flight == 1);
    moved.release();
    CHECK(idle(reg));
}

// A backend restarted with another build while a request holds one of its slots (preparing it,
// or running on it): the slot stays reserved by that request until it ends, and its end brings
// the in-flight count back to 0 (it stayed raised forever, and the reserved slot could be
// pinned by a second request while the first still ran there).
TEST_CASE(
    "registry: a restart with another build keeps running reservations, and their end counts") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 2);
    const auto a = document('a');
    const auto b = document('b');
    const auto now = routing::clock::now();
    routing::reservation first(reg, reg.reserve(&a, "", a.total_bytes, now));
    REQUIRE(first->p.slot);
    const int held_slot = *first->p.slot;
    reg.set_info(0, info_of("b2", 2), true);  // the upgrade, seen by the monitor
    {
        routing::reservation second(reg, reg.reserve(&b, "", b.total_bytes, now));
        CHECK(second->p.slot != held_slot);  // never the slot the first request holds
        second.release();
    }
    first.release();
    CHECK(reg.snapshot()[0].in_flight == 0);
    CHECK(idle(reg));
    // The same with fewer slots after the restart: the ticket's slot is gone, its count ends.
    routing::reservation third(reg, reg.reserve(&a, "", a.total_bytes, now));
    REQUIRE(third->p.slot);
    reg.set_info(0, info_of("b3", 1), true);
    third.release();
    CHECK(reg.snapshot()[0].in_flight == 0);
    CHECK(idle(reg));
}
