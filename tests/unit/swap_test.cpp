// Swap groups: which member to drain and which to start (routing/swap), as tables.
#include "routing/swap.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

namespace swap = warmslot::routing::swap;
using namespace std::chrono_literals;
using swap::state;

namespace {

const swap::clock::time_point t0{std::chrono::hours(1)};

// A member described in one line: state, waiting requests (the oldest waiting since t0 + wait),
// requests in flight, started at t0 + started, last used at t0 + used.
swap::member m(state st, std::size_t waiting = 0, swap::clock::duration wait = 0s,
               std::size_t busy = 0, swap::clock::duration started = 0s,
               swap::clock::duration used = 0s, bool home = false) {
    swap::member x;
    x.st = st;
    x.waiting = waiting;
    x.oldest_wait = t0 + wait;
    x.busy = busy;
    x.started = t0 + started;
    x.last_use = t0 + used;
    x.home = home;
    return x;
}

struct row {
    const char* what;
    swap::limits lim;
    std::vector<swap::member> members;
    swap::clock::duration now;  // after t0
    std::vector<std::size_t> start, drain;
    std::optional<std::size_t> held_by = std::nullopt;
};

const swap::limits one{1, 30s, 300s, {}};
const swap::limits two{2, 30s, 300s, {}};
// Four members: 0 and 1 may run together, 2 alone, 1 and 3 together.
const swap::limits pairs{2, 30s, 300s, {{0, 1}, {2}, {1, 3}}};

}  // namespace

TEST_CASE("swap: decisions") {
    const row rows[] = {
        {"nothing waits, nothing happens",
         one,
         {m(state::running, 0, 0s, 1), m(state::stopped)},
         60s,
         {},
         {}},
        {"a waiter in a free place starts",
         one,
         {m(state::stopped), m(state::stopped, 1)},
         60s,
         {1},
         {}},
        {"a waiter in a full group drains the idle member",
         one,
         {m(state::running), m(state::stopped, 1)},
         5s,
         {},
         {0}},
        {"a busy member that just started keeps its place",
         one,
         {m(state::running, 0, 0s, 2), m(state::stopped, 1)},
         10s,
         {},
         {},
         0},
        {"a busy member past min_residency is drained (fair turn)",
         one,
         {m(state::running, 0, 0s, 2), m(state::stopped, 1)},
         31s,
         {},
         {0}},
        {"min_residency 0: a busy member is drained at once",
         {1, 0s, 300s, {}},
         {m(state::running, 0, 0s, 2), m(state::stopped, 1)},
         1s,
         {},
         {0}},
        {"a member being drained frees the place: no second drain",
         one,
         {m(state::draining, 3), m(state::stopped, 1)},
         60s,
         {},
         {}},
        {"requests for the member being drained wait behind the swap",
         one,
         {m(state::draining, 3, 1s), m(state::stopped, 1, 2s)},
         60s,
         {},
         {}},
        {"a starting member is never drained while waited for",
         one,
         {m(state::starting, 2, 0s, 0, 50s), m(state::stopped, 1)},
         60s,
         {},
         {}},
        {"a starting member nobody waits for any more is not drained either (it is no running "
         "member)",
         one,
         {m(state::starting, 0, 0s, 0, 50s), m(state::stopped, 1)},
         60s,
         {},
         {}},
        {"the oldest waiter goes first",
         one,
         {m(state::stopped, 1, 5s), m(state::stopped, 4, 2s)},
         60s,
         {1},
         {}},
        {"two places, two waiters: both start",
         two,
         {m(state::stopped, 1, 5s), m(state::stopped, 1, 2s), m(state::stopped)},
         60s,
         {1, 0},
         {}},
        {"two places full, two waiters: the idle member goes for the first, the busy one past "
         "min_residency for the second",
         two,
         {m(state::running, 0, 0s, 1), m(state::running), m(state::stopped, 1, 1s),
          m(state::stopped, 1, 2s)},
         60s,
         {},
         {1, 0}},
        {"two places, one free: the oldest waiter takes it, the next drains a member",
         two,
         {m(state::running, 0, 0s, 1), m(state::stopped, 1, 1s), m(state::stopped, 1, 2s)},
         60s,
         {1},
         {0}},
        {"the idle member is drained before a busy one",
         two,
         {m(state::running, 0, 0s, 1, 0s, 50s), m(state::running, 0, 0s, 0, 0s, 10s),
          m(state::stopped, 1)},
         60s,
         {},
         {1}},
        {"among idle ones, the least recently used",
         two,
         {m(state::running, 0, 0s, 0, 0s, 40s), m(state::running, 0, 0s, 0, 0s, 10s),
          m(state::stopped, 1)},
         60s,
         {},
         {1}},
        {"the home is drained last",
         two,
         {m(state::running, 0, 0s, 0, 0s, 10s, true), m(state::running, 0, 0s, 0, 0s, 40s),
          m(state::stopped, 1)},
         60s,
         {},
         {1}},
        {"a waiter kept out blocks the ones behind it",
         one,
         {m(state::running, 0, 0s, 1, 50s), m(state::stopped, 1, 1s), m(state::stopped, 1, 2s)},
         60s,
         {},
         {},
         0},
        {"nobody waits: the home starts in a free place",
         one,
         {m(state::stopped, 0, 0s, 0, 0s, 0s, true), m(state::stopped)},
         60s,
         {0},
         {}},
        {"nobody waits: an idle member gives its place back to the home after home_after",
         one,
         {m(state::stopped, 0, 0s, 0, 0s, 0s, true), m(state::running, 0, 0s, 0, 0s, 10s)},
         311s,
         {},
         {1}},
        {"...not before",
         one,
         {m(state::stopped, 0, 0s, 0, 0s, 0s, true), m(state::running, 0, 0s, 0, 0s, 10s)},
         309s,
         {},
         {}},
        {"...nor while it is used",
         one,
         {m(state::stopped, 0, 0s, 0, 0s, 0s, true), m(state::running, 0, 0s, 1, 0s, 10s)},
         900s,
         {},
         {}},
        {"a waiter goes before the home",
         one,
         {m(state::stopped, 0, 0s, 0, 0s, 0s, true), m(state::stopped, 1)},
         60s,
         {1},
         {}},
        {"the home running: nothing to do",
         one,
         {m(state::running, 0, 0s, 0, 0s, 0s, true), m(state::stopped)},
         900s,
         {},
         {}},
    };
    for (const auto& r : rows) {
        CAPTURE(std::string(r.what));
        const auto d = swap::decide(r.lim, r.members, t0 + r.now);
        CHECK(d.start == r.start);
        CHECK(d.drain == r.drain);
        CHECK(d.held_by == r.held_by);
    }
}

TEST_CASE("swap: property: a decision never runs more members than max_running") {
    // Every combination of states for 3 members, with and without waiters, for 1 and 2 places.
    const state states[] = {state::stopped, state::starting, state::running, state::draining};
    for (std::size_t max = 1; max <= 2; ++max) {
        for (int code = 0; code < 4 * 4 * 4 * 8; ++code) {
            std::vector<swap::member> ms;
            int c = code;
            for (int i = 0; i < 3; ++i, c /= 4) ms.push_back(m(states[c % 4]));
            for (int i = 0; i < 3; ++i) ms[static_cast<std::size_t>(i)].waiting = (c >> i) & 1;
            if (swap::occupied(ms) > max) continue;  // not a state the supervisor reaches
            const auto d = swap::decide({max, 0s, 300s, {}}, ms, t0 + 60s);
            CAPTURE(code);
            CHECK(swap::occupied(ms) + d.start.size() <= max);
            for (auto i : d.start) CHECK(ms[i].st == state::stopped);
            for (auto i : d.drain) CHECK(ms[i].st == state::running);
        }
    }
}

TEST_CASE("swap: decisions with allowed sets") {
    const auto s = state::stopped;
    const auto r = state::running;
    const row rows[] = {
        {"a waiter that may run beside the running member starts beside it",
         pairs,
         {m(r), m(s, 1), m(s), m(s)},
         60s,
         {1},
         {}},
        {"a waiter that may run beside nobody drains every running member, idle or busy",
         pairs,
         {m(r, 0, 0s, 1), m(r), m(s, 1), m(s)},
         60s,
         {},
         {1, 0}},
        {"a waiter drains only the members outside its set",
         pairs,
         {m(r), m(r), m(s), m(s, 1)},
         60s,
         {},
         {0}},
        {"the set that drains the fewest members is chosen",
         {2, 30s, 300s, {{0, 1}, {2, 3}, {0, 3}}},
         {m(r), m(r), m(s), m(s, 1)},
         60s,
         {},
         {1}},
        {"between sets that drain as many, the one whose members are idle",
         {2, 30s, 300s, {{0, 1}, {0, 2}, {1, 2}}},
         {m(r, 0, 0s, 1, 0s, 50s), m(r, 0, 0s, 0, 0s, 55s), m(s, 1)},
         60s,
         {},
         {1}},
        {"...then not the home",
         {2, 30s, 300s, {{0, 1}, {0, 2}, {1, 2}}},
         {m(r, 0, 0s, 0, 0s, 10s, true), m(r, 0, 0s, 0, 0s, 55s), m(s, 1)},
         60s,
         {},
         {1}},
        {"...then the least recently used",
         {2, 30s, 300s, {{0, 1}, {0, 2}, {1, 2}}},
         {m(r, 0, 0s, 0, 0s, 50s), m(r, 0, 0s, 0, 0s, 10s), m(s, 1)},
         60s,
         {},
         {1}},
        {"a busy member that just started keeps its place: no set makes room",
         pairs,
         {m(r, 0, 0s, 2, 50s), m(s), m(s, 1), m(s)},
         60s,
         {},
         {},
         0},
        {"a member being drained already is not chosen again; the others outside the set are",
         pairs,
         {m(state::draining), m(r), m(s, 1), m(s)},
         60s,
         {},
         {1}},
        {"a promised place is kept: the next waiter neither starts beside the member being "
         "drained nor drains the promised one",
         pairs,
         {m(state::draining), m(s, 1, 5s), m(s, 1, 2s), m(s)},
         60s,
         {},
         {}},
        {"the oldest waiter first; the next one starts beside it when their set allows",
         pairs,
         {m(s), m(s, 1, 5s), m(s), m(s, 1, 2s)},
         60s,
         {3, 1},
         {}},
        {"a starting member is never drained",
         pairs,
         {m(state::starting, 0, 0s, 0, 50s), m(s), m(s, 1), m(s)},
         60s,
         {},
         {}},
        {"nobody waits: the home starts beside a member of its set",
         {2, 30s, 300s, {{0, 1}, {2}}},
         {m(r), m(s, 0, 0s, 0, 0s, 0s, true), m(s)},
         60s,
         {1},
         {}},
        {"nobody waits: the members outside the home's set give it their place after home_after",
         {2, 30s, 300s, {{0, 1}, {2}}},
         {m(s, 0, 0s, 0, 0s, 0s, true), m(s), m(r, 0, 0s, 0, 0s, 10s)},
         311s,
         {},
         {2}},
        {"...not while one of them is used",
         {2, 30s, 300s, {{0, 1}, {2}}},
         {m(s, 0, 0s, 0, 0s, 0s, true), m(s), m(r, 0, 0s, 1, 0s, 10s)},
         900s,
         {},
         {}},
    };
    for (const auto& x : rows) {
        CAPTURE(std::string(x.what));
        const auto d = swap::decide(x.lim, x.members, t0 + x.now);
        CHECK(d.start == x.start);
        CHECK(d.drain == x.drain);
        CHECK(d.held_by == x.held_by);
    }
}

TEST_CASE("swap: allowed sets") {
    const swap::limits lim = pairs;
    CHECK(swap::allowed(lim, {false, false, false, false}));
    CHECK(swap::allowed(lim, {true, true, false, false}));
    CHECK(swap::allowed(lim, {false, true, false, true}));
    CHECK(swap::allowed(lim, {false, false, true, false}));
    CHECK_FALSE(swap::allowed(lim, {true, false, true, false}));
    CHECK_FALSE(swap::allowed(lim, {true, true, false, true}));
    CHECK_FALSE(swap::allowed(lim, {true, false, false, true}));
    CHECK(swap::allowed(two, {true, true, false}));
    CHECK_FALSE(swap::allowed(two, {true, true, true}));
}

TEST_CASE("swap: property: with allowed sets, the members with a process always form one") {
    // Every combination of states and waiters for 4 members, under three lists of sets; only
    // states the supervisor reaches (the members with a process form an allowed set).
    const state states[] = {state::stopped, state::starting, state::running, state::draining};
    const std::vector<std::vector<std::vector<std::size_t>>> lists = {
        {{0, 1}, {2}, {1, 3}}, {{0}, {1}, {2}, {3}}, {{0, 1, 2}, {3}, {2, 3}}};
    for (const auto& allow : lists) {
        const swap::limits lim{3, 0s, 300s, allow};
        for (int code = 0; code < 256 * 16; ++code) {
            std::vector<swap::member> ms;
            int c = code;
            for (int i = 0; i < 4; ++i, c /= 4) ms.push_back(m(states[c % 4]));
            for (int i = 0; i < 4; ++i) {
                ms[static_cast<std::size_t>(i)].waiting = static_cast<std::size_t>((c >> i) & 1);
                ms[static_cast<std::size_t>(i)].oldest_wait = t0 + std::chrono::seconds(i);
            }
            std::vector<bool> present(4);
            for (std::size_t i = 0; i < 4; ++i) present[i] = ms[i].st != state::stopped;
            if (!swap::allowed(lim, present)) continue;
            const auto d = swap::decide(lim, ms, t0 + 60s);
            CAPTURE(code);
            auto after = present;
            for (auto i : d.start) {
                CHECK(ms[i].st == state::stopped);
                after[i] = true;
            }
            CHECK(swap::allowed(lim, after));
            for (auto i : d.drain) CHECK(ms[i].st == state::running);
            // Once the drains end, the members left and those started still form a set.
            for (std::size_t i = 0; i < 4; ++i) {
                if (ms[i].st == state::draining) after[i] = false;
            }
            for (auto i : d.drain) after[i] = false;
            CHECK(swap::allowed(lim, after));
            // A waiter is never left without a start or a drain while nothing is under way and
            // nothing is in use (residency 0): the oldest one always gets its turn.
            bool waiter = false, moving = false;
            for (const auto& x : ms) {
                waiter = waiter || (x.st == state::stopped && x.waiting > 0);
                moving = moving || x.st == state::draining || x.st == state::starting;
            }
            if (waiter && !moving) CHECK_FALSE(d.empty());
        }
    }
}
