// The registry's bookkeeping around requests it did not pin, checks after a sign of a restart,
// the probe's reservations, and plans limited to a request's own backend list.
#include "routing/registry.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace routing = warmslot::routing;
using nlohmann::json;

namespace {

void make_ready(routing::registry& reg, int backends, int slots) {
    for (int i = 0; i < backends; ++i) {
        routing::backend_info info;
        info.total_slots = slots;
        info.model_path = "m.gguf";
        reg.set_info(i, info, true);
        reg.set_healthy(i, true);
        reg.check_started(i);
        reg.check_done(i);
    }
}

routing::fingerprint document(char fill) {
    const json body = {{"messages",
                        {{{"role", "system"}, {"content", std::string(6000, fill)}},
                         {{"role", "user"}, {"content", "q"}}}}};
    return *routing::fingerprint_request(routing::request_kind::chat, body);
}

// One ready backend of `slots` slots without a scratch slot, and two documents.
struct one_backend {
    routing::registry reg{{"b"}, routing::planner_settings{.scratch_slot = false}};
    routing::clock::time_point now = routing::clock::now();
    routing::fingerprint a = document('a');
    routing::fingerprint b = document('b');
    explicit one_backend(int slots) { make_ready(reg, 1, slots); }
};

// A GET /slots reading of `count` slots, those in `processing` running a task.
std::vector<routing::observed_slot> reading(int count, const std::vector<int>& processing) {
    std::vector<routing::observed_slot> slots(static_cast<std::size_t>(count));
    for (int id = 0; id < count; ++id) {
        slots[static_cast<std::size_t>(id)].id = id;
        slots[static_cast<std::size_t>(id)].processing =
            std::find(processing.begin(), processing.end(), id) != processing.end();
    }
    return slots;
}

warmslot::api::prompt_stats stats(long cached, long processed) {
    warmslot::api::prompt_stats s;
    s.cached = cached;
    s.processed = processed;
    s.prompt_ms = 100;
    return s;
}

}  // namespace

TEST_CASE("registry: no slot is pinned while an unpinned request that may take one runs") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    const auto now = routing::clock::now();
    // A body that cannot be fingerprinted: sent unpinned, llama-server picks the slot.
    auto unpinned = reg.reserve(nullptr, "", 100, now);
    REQUIRE(unpinned.p.backend == 0);
    CHECK_FALSE(unpinned.p.slot);
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, now);
    CHECK_FALSE(t.p.slot);  // every slot's state is unknown: queued unpinned too
    CHECK(reg.reserve_idle(0, 1).empty());
    reg.cancel(t);
    reg.complete(unpinned, nullptr, stats(0, 10), now);
    auto after = reg.reserve(&fp, "", fp.total_bytes, now);
    CHECK(after.p.slot);  // known again once it is over
    reg.cancel(after);
}

TEST_CASE("registry: requests that take no slot (tokenize) do not block pinning") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    const auto now = routing::clock::now();
    auto tokenize =
        reg.reserve(nullptr, "", 100, now, true, routing::registry::all_backends, false);
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, now);
    CHECK(t.p.slot);
    reg.cancel(t);
    reg.cancel(tokenize);
}

TEST_CASE("registry: a failover send blocks pinning on its backend until it ends") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    const auto fp = document('a');
    reg.begin_unpinned(0);
    auto t = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK_FALSE(t.p.slot);
    reg.cancel(t);
    reg.end_unpinned(0);
    auto again = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK(again.p.slot);
    reg.cancel(again);
}

TEST_CASE("registry: a waiter cannot take a slot while an unpinned request runs") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 1);
    const auto fp = document('a');
    auto first = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(first.p.slot);
    reg.complete(first, &fp, stats(0, 2000), routing::clock::now());
    // Busy with our own request: a second one plans to wait for it.
    auto holder = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(holder.p.why == routing::route::hit);
    auto waiter = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(waiter.p.why == routing::route::wait_hit);
    reg.begin_unpinned(0);
    reg.complete(holder, &fp, stats(2000, 4), routing::clock::now());
    CHECK_FALSE(reg.try_take(waiter, routing::clock::now()));
    reg.end_unpinned(0);
    CHECK(reg.try_take(waiter, routing::clock::now()));
    reg.cancel(waiter);
}

TEST_CASE("registry: want_check keeps a backend out of plans until a later check is done") {
    routing::registry reg({"a", "b"}, routing::planner_settings{});
    make_ready(reg, 2, 2);
    int asked = -1;
    reg.set_check_listener([&](int b) { asked = b; });
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(t.p.backend == 0);
    reg.complete(t, &fp, stats(0, 2000), routing::clock::now());

    reg.check_started(0);  // a check under way may have read the backend before the restart
    const auto target = reg.want_check(0);
    CHECK(asked == 0);
    auto elsewhere = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK(elsewhere.p.backend == 1);  // not planned on backend 0's old beliefs
    reg.cancel(elsewhere);
    reg.check_done(0);
    CHECK(reg.checks_done(0) < target);  // the one under way does not count
    reg.check_started(0);
    reg.check_done(0);
    CHECK(reg.checks_done(0) >= target);
    auto back = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK(back.p.backend == 0);
    CHECK(back.p.why == routing::route::hit);
    reg.cancel(back);
    reg.set_check_listener(nullptr);
}

TEST_CASE("registry: a hit that reused nothing asks for a check before the next plan") {
    // A llama-server restarted between two of the monitor's checks has empty slots; the first
    // request planned on the old beliefs finds out (cached 0 where 2000 were expected). The
    // next one must not be pinned on the same beliefs before a check has read the backend.
    routing::registry reg({"a", "b"}, routing::planner_settings{});
    make_ready(reg, 2, 2);
    std::vector<int> asked;
    reg.set_check_listener([&](int b) { asked.push_back(b); });
    const auto fp = document('a');
    auto first = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(first.p.backend == 0);
    reg.complete(first, &fp, stats(0, 2000), routing::clock::now());
    CHECK(asked.empty());  // nothing was expected: a miss that computed its prompt
    auto hit = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(hit.p.why == routing::route::hit);
    REQUIRE(hit.p.expected_cached_tokens >= 256);
    reg.complete(hit, &fp, stats(0, 2000), routing::clock::now());
    CHECK(asked == std::vector<int>{0});
    CHECK(reg.totals().mispredictions == 1);
    auto next = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK(next.p.backend == 1);  // backend 0 waits for its check
    reg.cancel(next);
    reg.check_started(0);
    reg.check_done(0);
    auto back = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    CHECK(back.p.backend == 0);
    // A hit that reused what it was planned to: no check.
    reg.complete(back, &fp, stats(1990, 10), routing::clock::now());
    CHECK(asked.size() == 1);
    reg.set_check_listener(nullptr);
}

TEST_CASE("registry: the listener hears releases, completions and checks") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    int heard = 0;
    reg.set_listener([&] { ++heard; });
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    reg.complete(t, &fp, stats(0, 2000), routing::clock::now());
    CHECK(heard == 1);
    auto u = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    reg.cancel(u);
    CHECK(heard == 2);
    reg.check_started(0);
    reg.check_done(0);
    CHECK(heard == 3);
    reg.set_listener(nullptr);
}

TEST_CASE("registry: the probe's reservations take idle slots only, all or none") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 3);
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    REQUIRE(t.p.slot);
    CHECK(reg.reserve_idle(0, 3).empty());  // one is busy
    auto two = reg.reserve_idle(0, 2);
    REQUIRE(two.size() == 2);
    for (const auto& p : two) CHECK(*p.p.slot != *t.p.slot);
    // Seen processing by GET /slots without a ticket of ours: never reserved either.
    for (const auto& p : two) reg.release(p);
    std::vector<routing::observed_slot> seen;
    for (int i = 0; i < 3; ++i) seen.push_back({i, i != *t.p.slot, std::nullopt, std::nullopt});
    reg.reconcile(0, seen, routing::clock::now() + std::chrono::seconds(5));
    CHECK(reg.reserve_idle(0, 1).empty());
    reg.cancel(t);
}

TEST_CASE("registry: a plan never names a backend beyond the request's config") {
    routing::registry reg({"a", "b"}, routing::planner_settings{});
    make_ready(reg, 2, 2);
    const auto fp = document('a');
    // Backend 1 is the better choice (it holds the prefix) but the request knows only one.
    auto warm = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now(), true, 2);
    reg.cancel(warm);
    auto on1 = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now());
    reg.complete(on1, &fp, stats(0, 2000), routing::clock::now());
    for (int k = 0; k < 4; ++k) {
        auto t = reg.reserve(&fp, "", fp.total_bytes, routing::clock::now(), true, 1);
        CHECK(t.p.backend == 0);
        reg.cancel(t);
    }
    // Only backends past the list: none, not an index out of it.
    routing::registry grown({"a", "b"}, routing::planner_settings{});
    make_ready(grown, 2, 2);
    grown.set_healthy(0, false);
    auto none = grown.reserve(&fp, "", fp.total_bytes, routing::clock::now(), true, 1);
    CHECK(none.p.backend == -1);
}

TEST_CASE("registry: a request waits for the slots llama-server would give it instead of its own") {
    routing::registry reg({"b"}, routing::planner_settings{.scratch_slot = false});
    make_ready(reg, 1, 3);
    const auto now = routing::clock::now();
    const auto a = document('a');
    const auto other = document('b');
    auto first = reg.reserve(&a, "", a.total_bytes, now);
    auto second = reg.reserve(&a, "", a.total_bytes, now);
    auto unrelated = reg.reserve(&other, "", other.total_bytes, now);
    REQUIRE(first.p.slot);
    REQUIRE(second.p.slot);
    REQUIRE(unrelated.p.slot);
    const bool first_low = *first.p.slot < *second.p.slot;
    auto& lower = first_low ? first : second;
    auto& higher = first_low ? second : first;
    // Nothing prepared yet, nothing held: no slot would take the request from another.
    CHECK(reg.ahead(0, *higher.p.slot, a).empty());
    // Both being prepared with the document: the higher one waits for the lower one, which
    // waits for nothing while its own slot holds the prefix (no two wait for each other).
    reg.set_preparing(lower, true);
    reg.set_preparing(higher, true);
    reg.set_preparing(unrelated, true);
    CHECK(reg.ahead(0, *higher.p.slot, a).unsent);
    reg.set_held(lower, a.levels, 6000);
    reg.set_held(higher, a.levels, 6000);
    CHECK(reg.ahead(0, *lower.p.slot, a).empty());
    auto seen = reg.ahead(0, *higher.p.slot, a);
    CHECK(seen.unsent);
    CHECK(seen.sent.empty());
    const auto when = now + std::chrono::milliseconds(5);
    reg.sending(lower, when);
    reg.sending(unrelated, when);
    seen = reg.ahead(0, *higher.p.slot, a);
    CHECK_FALSE(seen.unsent);
    REQUIRE(seen.sent.size() == 1);  // the slot prepared for another document never counts
    CHECK(seen.sent[0].first == *lower.p.slot);
    CHECK(seen.sent[0].second == when);
    reg.cancel(lower);  // its request is over: nothing ahead any more
    CHECK(reg.ahead(0, *higher.p.slot, a).empty());
    reg.cancel(higher);
    reg.cancel(unrelated);
}

TEST_CASE(
    "registry: a request whose slot could not be prepared waits for every slot with its prefix") {
    routing::registry reg({"b"}, routing::planner_settings{.scratch_slot = false});
    make_ready(reg, 1, 2);
    const auto now = routing::clock::now();
    const auto a = document('a');
    auto prepared = reg.reserve(&a, "", a.total_bytes, now);
    auto bare = reg.reserve(&a, "", a.total_bytes, now);
    REQUIRE(prepared.p.slot);
    REQUIRE(bare.p.slot);
    reg.set_preparing(prepared, true);
    reg.set_held(prepared, a.levels, 6000);
    // Whatever the ids, the slot holding the prefix takes the unprepared request first.
    const auto seen = reg.ahead(0, *bare.p.slot, a);
    CHECK(seen.unsent);
    // The prepared one does not wait for the unprepared one (its slot will not hold the prefix).
    CHECK(reg.ahead(0, *prepared.p.slot, a).empty());
    reg.sending(prepared, now);
    CHECK(reg.ahead(0, *bare.p.slot, a).sent.size() == 1);
    reg.cancel(prepared);
    CHECK(reg.ahead(0, *bare.p.slot, a).empty());
    reg.cancel(bare);
}

TEST_CASE("registry: two requests waiting for their turn never wait for each other") {
    one_backend f(2);
    auto& reg = f.reg;
    const auto now = f.now;
    const auto& a = f.a;
    const auto& b = f.b;
    auto first = reg.reserve(&a, "", a.total_bytes, now);
    auto second = reg.reserve(&b, "", b.total_bytes, now);
    REQUIRE(first.p.slot);
    REQUIRE(second.p.slot);
    // Each slot holds the other request's prefix: each request, its own slot not holding its
    // prefix, counts the other's slot as ahead.
    reg.set_held(first, b.levels, 6000);
    reg.set_held(second, a.levels, 6000);
    CHECK(reg.ahead(0, *first.p.slot, a).unsent);
    CHECK(reg.ahead(0, *second.p.slot, b).unsent);
    // Both waiting for their turn: the lower slot's request goes, the higher one waits for it.
    reg.set_waiting_turn(first, true);
    reg.set_waiting_turn(second, true);
    const bool first_low = *first.p.slot < *second.p.slot;
    auto& low = first_low ? first : second;
    auto& high = first_low ? second : first;
    const auto& low_fp = first_low ? a : b;
    const auto& high_fp = first_low ? b : a;
    CHECK(reg.ahead(0, *low.p.slot, low_fp).empty());
    CHECK(reg.ahead(0, *high.p.slot, high_fp).unsent);
    // Waiting or not, the end of a ticket clears its mark.
    reg.cancel(low);
    CHECK(reg.ahead(0, *high.p.slot, high_fp).empty());
    reg.cancel(high);
}

TEST_CASE("registry: a tenant-scoped preview sees no other tenant's prompt, hit or eviction") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 3);
    const auto now = routing::clock::now();
    const auto fp = document('a');
    // Tenant a's request fills a slot with its document.
    auto t =
        reg.reserve(&fp, "", fp.total_bytes, now, true, routing::registry::all_backends, true, "a");
    REQUIRE(t.p.slot);
    reg.complete(t, &fp, stats(0, 2000), now);
    const std::string a = "a", b = "b";
    CHECK(reg.preview(&fp, "", now).why == routing::route::hit);  // unscoped: the truth
    CHECK(reg.preview(&fp, "", now, &a).why == routing::route::hit);
    CHECK(reg.preview(&fp, "", now, &a).expected_cached_tokens > 0);
    const auto seen_by_b = reg.preview(&fp, "", now, &b);
    CHECK(seen_by_b.why == routing::route::miss_new_prefix);
    CHECK(seen_by_b.expected_cached_tokens == 0);
    CHECK(seen_by_b.matched_levels == 0);
    // Other documents push a's out of the slots: b is not told that it was evicted either.
    for (char fill : {'b', 'c', 'd', 'e'}) {
        const auto other = document(fill);
        auto o = reg.reserve(&other, "", other.total_bytes, now, true,
                             routing::registry::all_backends, true, "c");
        reg.complete(o, &other, stats(0, 2000), now);
    }
    REQUIRE(reg.preview(&fp, "", now).why == routing::route::miss_evicted);
    CHECK(reg.preview(&fp, "", now, &b).why == routing::route::miss_new_prefix);
}

TEST_CASE(
    "registry: under isolation another tenant's slot is no hit, and a victim only after empty "
    "ones") {
    routing::planner_settings settings;
    settings.scratch_slot = false;
    routing::registry reg({"b"}, settings);
    make_ready(reg, 1, 3);
    const auto now = routing::clock::now();
    const auto fp = document('a');
    auto t = reg.reserve(&fp, "", fp.total_bytes, now, true, routing::registry::all_backends, true,
                         "a", true);
    REQUIRE(t.p.slot);
    const int a_slot = *t.p.slot;
    reg.complete(t, &fp, stats(0, 2000), now);
    REQUIRE(reg.snapshot()[0].slots[static_cast<std::size_t>(a_slot)].owner == "a");
    // a's own request finds it.
    auto again = reg.reserve(&fp, "", fp.total_bytes, now, true, routing::registry::all_backends,
                             true, "a", true);
    CHECK(again.p.why == routing::route::hit);
    CHECK(again.p.slot == a_slot);
    reg.release(again);
    // b's identical request: a new prefix, on an empty slot, never a's.
    const std::string b = "b";
    const auto preview = reg.preview(&fp, "", now, &b, true);
    CHECK(preview.why == routing::route::miss_new_prefix);
    CHECK(preview.expected_cached_tokens == 0);
    auto tb = reg.reserve(&fp, "", fp.total_bytes, now, true, routing::registry::all_backends, true,
                          "b", true);
    CHECK(tb.p.why == routing::route::miss_new_prefix);
    REQUIRE(tb.p.slot);
    CHECK(*tb.p.slot != a_slot);
    reg.complete(tb, &fp, stats(0, 2000), now);
    // Without isolation b's request reuses a's slot (the text is b's own, sent again).
    auto shared =
        reg.reserve(&fp, "", fp.total_bytes, now, true, routing::registry::all_backends, true, "c");
    CHECK(shared.p.why == routing::route::hit);
    reg.release(shared);
}

TEST_CASE("registry: has_idle_slot is false while every slot is reserved") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    const auto now = routing::clock::now();
    CHECK(reg.has_idle_slot());
    const auto d1 = document('a');
    const auto d2 = document('b');
    auto t1 = reg.reserve(&d1, "", d1.total_bytes, now);
    auto t2 = reg.reserve(&d2, "", d2.total_bytes, now);
    REQUIRE(t1.p.slot);
    REQUIRE(t2.p.slot);
    CHECK_FALSE(reg.has_idle_slot());
    CHECK_FALSE(reg.has_idle_slot(0));
    reg.release(t1);
    CHECK(reg.has_idle_slot());
    reg.release(t2);
}

TEST_CASE("registry: a slot's work from warmslot's marks and from GET /slots") {
    routing::registry reg({"b"}, routing::planner_settings{});
    make_ready(reg, 1, 2);
    {
        const routing::work_mark mark(reg, 0, 1, routing::slot_work::priming, 24000);
        routing::observed_slot o;
        o.id = 1;
        o.processing = true;
        o.n_prompt_tokens = 5000;
        reg.reconcile(0, {routing::observed_slot{}, o}, routing::clock::now());
        const auto views = reg.snapshot();
        const auto& s = views[0].slots[1];
        CHECK(s.work == routing::slot_work::priming);
        CHECK(s.work_done == 5000);
        CHECK(s.work_total == 24000);
    }
    CHECK(reg.snapshot()[0].slots[1].work == routing::slot_work::none);
    // A task llama-server runs there: "running" while /slots shows it, then nothing.
    routing::observed_slot busy;
    busy.id = 0;
    busy.processing = true;
    busy.n_prompt_tokens = 700;
    routing::observed_slot other;
    other.id = 1;
    reg.reconcile(0, {busy, other}, routing::clock::now());
    CHECK(reg.snapshot()[0].slots[0].work == routing::slot_work::running);
    CHECK(reg.snapshot()[0].slots[0].work_done == 700);
    busy.processing = false;
    reg.reconcile(0, {busy, other}, routing::clock::now());
    CHECK(reg.snapshot()[0].slots[0].work == routing::slot_work::none);
}

TEST_CASE("registry: a floating request seen running on its planned slot leaves the others known") {
    one_backend f(3);
    auto t = f.reg.reserve(&f.a, "", f.a.total_bytes, f.now);
    REQUIRE(t.p.slot);
    const auto planned = *t.p.slot;
    f.reg.mark_floating(t);
    // Not sent yet: nothing to see, and while it floats no other slot is pinned.
    CHECK(f.reg.unsettled_floating(0) == 0);
    CHECK_FALSE(f.reg.settle_floating(0, reading(3, {planned}), f.now));
    CHECK_FALSE(f.reg.preview(&f.b, "", f.now).slot);
    f.reg.sending(t, f.now);
    CHECK(f.reg.unsettled_floating(0) == 1);
    // Its slot idle, another processing: it may be running there.
    const int other = planned == 0 ? 1 : 0;
    CHECK_FALSE(f.reg.settle_floating(0, reading(3, {other}), f.now));
    CHECK_FALSE(f.reg.preview(&f.b, "", f.now).slot);
    // An unpinned request runs too: it may be on the planned slot.
    f.reg.begin_unpinned(0);
    CHECK(f.reg.unsettled_floating(0) == 0);
    CHECK_FALSE(f.reg.settle_floating(0, reading(3, {planned}), f.now));
    f.reg.end_unpinned(0);
    // Seen on its planned slot: that one stays busy, the others are planned on again.
    CHECK(f.reg.settle_floating(0, reading(3, {planned}), f.now));
    CHECK(f.reg.unsettled_floating(0) == 0);
    auto next = f.reg.reserve(&f.b, "", f.b.total_bytes, f.now);
    REQUIRE(next.p.slot);
    CHECK(*next.p.slot != planned);
    f.reg.cancel(next);
    // A second floating request, not seen yet, makes them unknown again; its end does not
    // undo the first one's settlement.
    auto second = f.reg.reserve(&f.b, "", f.b.total_bytes, f.now);
    REQUIRE(second.p.slot);
    f.reg.mark_floating(second);
    CHECK_FALSE(f.reg.preview(&f.b, "", f.now).slot);
    f.reg.cancel(second);
    CHECK(f.reg.preview(&f.b, "", f.now).slot);
    // Ended: its slot takes plans again, and nothing floats.
    f.reg.complete(t, &f.a, stats(0, 2000), f.now);
    const auto after = f.reg.preview(&f.a, "", f.now);
    REQUIRE(after.slot);
    CHECK(*after.slot == planned);
}

TEST_CASE(
    "registry: a slot whose answer just ended is no proof that a floating request runs there") {
    routing::registry reg({"b"}, routing::planner_settings{.scratch_slot = false});
    make_ready(reg, 1, 2);
    const auto now = routing::clock::now();
    const auto a = document('a');
    auto first = reg.reserve(&a, "", a.total_bytes, now);
    REQUIRE(first.p.slot);
    reg.complete(first, &a, stats(0, 2000), now);
    auto t = reg.reserve(&a, "", a.total_bytes, now);
    REQUIRE(t.p.slot);
    CHECK(*t.p.slot == *first.p.slot);
    reg.mark_floating(t);
    reg.sending(t, now);
    const auto slots = reading(2, {*t.p.slot});
    CHECK_FALSE(reg.settle_floating(0, slots, now + std::chrono::milliseconds(100)));
    CHECK(reg.settle_floating(0, slots, now + std::chrono::seconds(1)));
    reg.cancel(t);
}

TEST_CASE("registry: a reservation moves only to an idle slot nobody holds") {
    one_backend f(3);
    auto t = f.reg.reserve(&f.a, "", f.a.total_bytes, f.now);
    const int from = t.p.slot.value_or(-1);
    auto other = f.reg.reserve(&f.b, "", f.b.total_bytes, f.now);
    REQUIRE(from >= 0);
    REQUIRE(other.p.slot);
    int free_slot = 0;
    while (free_slot == from || free_slot == *other.p.slot) ++free_slot;
    CHECK_FALSE(f.reg.move_reservation(t, *other.p.slot));  // another ticket's
    CHECK_FALSE(f.reg.move_reservation(t, 7));              // no such slot
    CHECK(f.reg.move_reservation(t, free_slot));
    CHECK(*t.p.slot == free_slot);
    CHECK(t.p.expected_cached_tokens == 0);
    auto views = f.reg.snapshot();
    CHECK_FALSE(views[0].slots[static_cast<std::size_t>(from)].busy);
    CHECK(views[0].slots[static_cast<std::size_t>(free_slot)].busy);
    // The slot it left takes plans again; the one it took does not.
    auto third = f.reg.reserve(&f.a, "", f.a.total_bytes, f.now);
    REQUIRE(third.p.slot);
    CHECK(*third.p.slot == from);
    f.reg.cancel(third);
    // Its answer is believed where it moved.
    f.reg.complete(t, &f.a, stats(0, 2000), f.now);
    views = f.reg.snapshot();
    CHECK(views[0].slots[static_cast<std::size_t>(free_slot)].held.size() == f.a.levels.size());
    CHECK(views[0].slots[static_cast<std::size_t>(from)].held.empty());
    f.reg.cancel(other);
}

TEST_CASE(
    "registry: a higher slot's request waiting for its turn is ahead when it does not wait for "
    "this one") {
    one_backend f(2);
    auto low = f.reg.reserve(&f.a, "", f.a.total_bytes, f.now);
    auto high = f.reg.reserve(&f.a, "", f.a.total_bytes, f.now);
    REQUIRE(low.p.slot);
    REQUIRE(high.p.slot);
    if (*low.p.slot > *high.p.slot) std::swap(low, high);
    // The higher slot was prepared with the document; the lower one could not be (empty).
    f.reg.set_held(high, f.a.levels, 6000);
    CHECK(f.reg.ahead(0, *low.p.slot, f.a).unsent);
    // Its request marks itself waiting for a moment (it waits for nothing: no lower slot holds
    // the document): the lower one still waits for it to run there.
    f.reg.set_waiting_turn(high, true);
    CHECK(f.reg.ahead(0, *high.p.slot, f.a).empty());
    CHECK(f.reg.ahead(0, *low.p.slot, f.a).unsent);
    f.reg.set_waiting_turn(high, false);
    f.reg.cancel(low);
    f.reg.cancel(high);
}
