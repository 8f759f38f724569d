// The routing planner as tables of scenarios, one row per rule (see `choose` in planner.hpp).
#include <doctest/doctest.h>

#include <string_view>
#include <utility>
#include <vector>

#include "planner_fixtures.hpp"

using namespace planner_fixtures;

TEST_CASE("planner: hits and the longest match") {
    check({
        {"hit on an idle slot: same document, other question",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)})},
         doc_a_q2,
         {0, 0, route::hit, 2, 20200}},
        {"the request extends what the slot holds",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)})},
         request({sys, doc_a, q1, a1, q2}, 4),
         {0, 0, route::hit, 3, 20300}},
        {"the longest match wins",
         {backend({idle(0, {sys, q1}), idle(1, {sys, doc_a, q1}), idle(2)})},
         doc_a_q2,
         {0, 1, route::hit, 2, 20200}},
        {"a slot sharing only the system prompt is kept while an empty slot exists",
         {backend({idle(0, {sys, doc_a, q1}), idle(1), idle(2)})},
         request({sys, doc_b, q1}, 2),
         {0, 1, route::miss_new_prefix}},
    });
}

TEST_CASE("planner: busy slots are waited for only when it pays") {
    check({
        {"busy hit, saving (20.2 s) worth more than the wait (2 s): wait_hit",
         {backend({busy(0, {sys, doc_a, q1}, 2), idle(1), idle(2)}, 1)},
         doc_a_q2,
         {0, 0, route::wait_hit, 2, 20200}},
        {"busy hit, wait (60 s) longer than the saving: miss_slot_busy on an idle slot",
         {backend({busy(0, {sys, doc_a, q1}, 60), idle(1), idle(2)}, 1)},
         doc_a_q2,
         {0, 1, route::miss_slot_busy}},
        {"busy hit beyond max_wait_seconds is not waited for",
         {backend({busy(0, {sys, doc_a, q1}, 15), idle(1), idle(2)}, 1)},
         doc_a_q2,
         {0, 1, route::miss_slot_busy},
         "",
         with_max_wait(10)},
        {"busy hit against a smaller idle hit: extra saving 20 s > wait 5 s",
         {backend({busy(0, {sys, doc_a, q1}, 5), idle(1, {sys, q1}), idle(2)}, 1)},
         doc_a_q2,
         {0, 0, route::wait_hit, 2, 20200}},
        {"busy hit against a smaller idle hit: wait 30 s, take the idle one",
         {backend({busy(0, {sys, doc_a, q1}, 30), idle(1, {sys, q1}), idle(2)}, 1)},
         doc_a_q2,
         {0, 1, route::miss_diverged, 1, 200, 1}},
        {"overdue busy slot (busy_until passed) counts as a zero wait",
         {backend({busy(0, {sys, doc_a, q1}, -3), idle(1), idle(2)}, 1)},
         doc_a_q2,
         {0, 0, route::wait_hit, 2, 20200}},
        {"no idle slot and no hit: no pin, llama-server queues it",
         {backend({busy(0, {doc_b}), busy(1, {q1})}, 2)},
         doc_a_q2,
         {0, std::nullopt, route::miss_slot_busy}},
        {"no idle slot anywhere: the backend with the fewest in_flight",
         {backend({busy(0), busy(1)}, 3), backend({busy(0), busy(1)}, 2)},
         doc_a_q2,
         {1, std::nullopt, route::miss_slot_busy}},
    });
}

TEST_CASE("planner: eviction order") {
    check({
        {"empty slot first",
         {backend({valued(0, 10, 0, 5), idle(1), idle(2)})},
         doc_a_q2,
         {0, 1, route::miss_new_prefix}},
        {"then the lowest held tokens x (1 + recent hits)",
         {backend({valued(0, 20000, 0, 5), valued(1, 5000, 5, 5), valued(2, 8000, 1, 5), idle(3)})},
         doc_a_q2,
         {0, 2, route::miss_new_prefix}},
        {"then the oldest last use",
         {backend(
             {valued(0, 8000, 1, 5), valued(1, 8000, 1, 50), valued(2, 8000, 1, 20), idle(3)})},
         doc_a_q2,
         {0, 1, route::miss_new_prefix}},
        {"a busy slot is never the victim, even when cheapest",
         {backend({busy(0, {q1}, 1), valued(1, 20000, 0, 5), idle(2)}, 1)},
         doc_a_q2,
         {0, 1, route::miss_new_prefix}},
        {"held_tokens unknown: value estimated from the held bytes",
         {backend({[] {
                       auto s = idle(0, {doc_b});
                       s.held_tokens = 0;
                       return s;
                   }(),
                   valued(1, 5000, 0, 5), idle(2)})},
         doc_a_q2,
         {0, 1, route::miss_new_prefix}},
    });
}

TEST_CASE("planner: scratch slot for short one-offs") {
    check({
        {"a one-off goes to the scratch slot (highest id), keeping the long prefix",
         {backend({idle(0, {sys, doc_a, q1}), idle(1, {{"other", 300}})})},
         one_off,
         {0, 1, route::scratch}},
        {"a one-off prefers the scratch slot to an empty one",
         {backend({idle(0, {sys, doc_a, q1}), idle(1), idle(2, {{"other", 300}})})},
         one_off,
         {0, 2, route::scratch}},
        {"scratch busy: the cheapest other idle slot, never the long prefix",
         {backend({idle(0, {sys, doc_a, q1}), valued(1, 500, 0, 5), busy(2, {{"o", 300}})}, 1)},
         one_off,
         {0, 1, route::scratch}},
        {"nothing idle: pass_through without a slot",
         {backend({busy(0, {sys, doc_a}), busy(1, {{"o", 300}})}, 2)},
         one_off,
         {0, std::nullopt, route::pass_through}},
        {"a short follow-up that hits its conversation slot takes the hit",
         {backend({idle(0, {{"sysS", 200}, {"u1", 100}, {"a1", 300}}), idle(1)})},
         request({{"sysS", 200}, {"u1", 100}, {"a1", 300}, {"u2", 80}}, 3),
         {0, 0, route::hit, 3, 600}},
        {"a one-off sharing only the system prompt does not cut a long slot",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)})},
         request({sys, {"hi", 100}}, 1),
         {0, 1, route::scratch}},
        {"a long request avoids an idle scratch slot",
         {backend({idle(0, {{"sysB", 200}, doc_b, q1}), idle(1)})},
         doc_a_q2,
         {0, 0, route::miss_new_prefix}},
        {"a long request takes the scratch slot when it is the only idle one",
         {backend({busy(0, {doc_b}), idle(1)}, 1)},
         doc_a_q2,
         {0, 1, route::miss_new_prefix}},
        {"a long request reuses its own prefix left in the scratch slot",
         {backend({idle(0, {doc_b}), idle(1, {sys, doc_a, q1})})},
         doc_a_q2,
         {0, 1, route::hit, 2, 20200}},
        {"slots marked scratch by the caller are honoured",
         {backend({marked_scratch(idle(0, {{"o", 300}})), idle(1, {doc_b}), idle(2)})},
         one_off,
         {0, 0, route::scratch}},
        {"scratch disabled: a one-off is a plain miss",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)})},
         one_off,
         {0, 1, route::miss_new_prefix},
         "",
         without_scratch()},
        {"a single-slot backend has no scratch slot",
         {backend({idle(0, {sys, doc_a, q1})})},
         one_off,
         {0, 0, route::miss_new_prefix}},
        {"a short request with one long segment is not a one-off",
         {backend({idle(0, {doc_b}), idle(1)})},
         request({{"big", 600}}, 0),
         {0, 0, route::miss_new_prefix}},
    });
}

TEST_CASE("planner: models, health and pinning") {
    check({
        {"the model filters backends, even against a hit",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)}, 0, {"qwen"}),
          backend({idle(0), idle(1)}, 3, {"llama"})},
         doc_a_q2,
         {1, 0, route::miss_new_prefix},
         "llama"},
        {"unknown model: -1",
         {backend({idle(0)}, 0, {"qwen"}), backend({idle(0)}, 0, {"llama"})},
         doc_a_q2,
         {-1, std::nullopt, route::pass_through, 0, 0, 0, true},
         "gemma"},
        {"a backend without a model list answers to any model",
         {backend({idle(0)}, 0, {"qwen"}), backend({idle(0)}, 5)},
         doc_a_q2,
         {1, 0, route::miss_new_prefix},
         "gemma"},
        {"no request model: every backend",
         {backend({idle(0)}, 2, {"qwen"}), backend({idle(0)}, 0, {"llama"})},
         doc_a_q2,
         {1, 0, route::miss_new_prefix}},
        {"the only backend serving the model is unhealthy: -1",
         {unhealthy(backend({idle(0)}, 0, {"qwen"})), backend({idle(0)}, 0, {"llama"})},
         doc_a_q2,
         {-1, std::nullopt, route::pass_through},
         "qwen"},
        {"no healthy backend: -1",
         {unhealthy(backend({idle(0, {sys, doc_a, q1})}))},
         doc_a_q2,
         {-1, std::nullopt, route::pass_through}},
        {"no backend at all: -1", {}, doc_a_q2, {-1, std::nullopt, route::pass_through}},
        {"pinning false: pass_through without a slot, even holding the prefix",
         {no_pinning(backend({idle(0, {sys, doc_a, q1}), idle(1)}))},
         doc_a_q2,
         {0, std::nullopt, route::pass_through}},
        {"pinning false but less loaded than the pinning backend's miss",
         {backend({idle(0), idle(1)}, 2), no_pinning(backend({idle(0), idle(1)}, 0))},
         doc_a_q2,
         {1, std::nullopt, route::pass_through}},
        {"equal load: the pinning backend, which gains a cached prefix",
         {no_pinning(backend({idle(0), idle(1)}, 1)), backend({idle(0), idle(1)}, 1)},
         doc_a_q2,
         {1, 0, route::miss_new_prefix}},
        {"no fingerprint: the fewest in_flight, lowest index on ties",
         {backend({idle(0)}, 3), backend({idle(0)}, 1), backend({idle(0)}, 1)},
         std::nullopt,
         {1, std::nullopt, route::pass_through}},
    });
}

TEST_CASE("planner: replicas, affinity against load") {
    // A conversation: 5.2 s of prefill, of which the slot holding sys+u1+a1 saves 2.2 s.
    const segments history{sys, {"u1", 1000}, {"a1", 1000}};
    const auto conversation = request({sys, {"u1", 1000}, {"a1", 1000}, {"u2", 3000}}, 3);
    check({
        {"affinity: the replica holding the prefix",
         {backend({idle(0), idle(1)}), backend({idle(0, {sys, doc_a, q1}), idle(1)})},
         doc_a_q2,
         {1, 0, route::hit, 2, 20200}},
        {"equal misses: the replica with fewer in_flight",
         {backend({idle(0), idle(1)}, 1), backend({idle(0), idle(1)}, 0)},
         doc_a_q2,
         {1, 0, route::miss_new_prefix}},
        {"equal hits: the replica with fewer in_flight",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)}, 2),
          backend({idle(0, {sys, doc_a, q1}), idle(1)}, 1)},
         doc_a_q2,
         {1, 0, route::hit, 2, 20200}},
        {"a long saved prefix keeps affinity under load: 3 x 0.1 s < 20.2 s",
         {backend({idle(0, {sys, doc_a, q1}), idle(1)}, 3), backend({idle(0), idle(1)}, 0)},
         doc_a_q2,
         {0, 0, route::hit, 2, 20200}},
        {"no load: the hit wins",
         {backend({idle(0, history), idle(1)}, 0), backend({idle(0), idle(1)}, 0)},
         conversation,
         {0, 0, route::hit, 3, 2200}},
        {"overloaded: 1 x 3.0 s still to prefill > 2.2 s saved, the idle replica wins",
         {backend({idle(0, history), idle(1)}, 1), backend({idle(0), idle(1)}, 0)},
         conversation,
         {1, 0, route::miss_slot_busy}},
    });
}

TEST_CASE("planner: evicted and diverged prefixes") {
    const auto levels = chain({sys, doc_a});
    check({
        {"a request level recently evicted: miss_evicted",
         {backend({idle(0), idle(1)})},
         doc_a_q2,
         {0, 0, route::miss_evicted},
         "",
         {},
         {12345, levels[1].hash}},
        {"not in the evicted list: miss_new_prefix",
         {backend({idle(0), idle(1)})},
         doc_a_q2,
         {0, 0, route::miss_new_prefix},
         "",
         {},
         {12345}},
        {"history re-rendered at message 3: still that slot, miss_diverged at 3",
         {backend({idle(0, {sys, doc_a, q1, a1, q2}), idle(1), idle(2)})},
         request({sys, doc_a, q1, a1x, q2, a1, {"q3", 100}}, 6),
         {0, 0, route::miss_diverged, 3, 20300, 3}},
        {"document edited, the slot is the only one left: miss_diverged at 1",
         {backend({idle(0, {sys, doc_a, q1}), busy(1, {doc_b})}, 1)},
         request({sys, doc_a2, q1}, 2),
         {0, 0, route::miss_diverged, 1, 200, 1}},
        {"a busy hit whose stable part diverged stays a wait_hit",
         {backend({busy(0, {sys, doc_a, q1, a1, q2}, 1), idle(1), idle(2)}, 1)},
         request({sys, doc_a, q1, a1x, q2, a1, {"q3", 100}}, 6),
         {0, 0, route::wait_hit, 3, 20300, 3}},
    });
}

TEST_CASE("planner: route names") {
    const std::vector<std::pair<route, std::string_view>> names{
        {route::hit, "hit"},
        {route::wait_hit, "wait_hit"},
        {route::miss_new_prefix, "miss_new_prefix"},
        {route::miss_evicted, "miss_evicted"},
        {route::miss_slot_busy, "miss_slot_busy"},
        {route::miss_diverged, "miss_diverged"},
        {route::scratch, "scratch"},
        {route::pass_through, "pass_through"},
    };
    for (const auto& [r, n] : names) CHECK(rt::name(r) == n);
}

TEST_CASE("planner: scratch and one-off helpers") {
    const rt::planner_settings settings;
    const auto b = backend({idle(3), idle(7), idle(5)});
    CHECK(rt::is_scratch(b, b.slots[1], settings));
    CHECK_FALSE(rt::is_scratch(b, b.slots[0], settings));
    CHECK_FALSE(rt::is_scratch(b, b.slots[1], without_scratch()));
    CHECK(rt::is_one_off(one_off, b, settings));
    CHECK_FALSE(rt::is_one_off(doc_a_q2, b, settings));
    auto sparse = b;
    sparse.tokens_per_byte = 0.3;  // 1000 bytes = 300 tokens: still short
    CHECK(rt::is_one_off(request({{"a", 900}, {"b", 900}}, 1), sparse, settings));
}

namespace {

rt::slot_view of_session(rt::slot_view s, std::uint64_t session, int age_seconds = 0) {
    s.session = session;
    s.last_use = now - seconds(age_seconds);
    return s;
}

rt::fingerprint in_session(rt::fingerprint fp, std::uint64_t session) {
    fp.session = session;
    return fp;
}

}  // namespace

TEST_CASE("planner: session hints choose among slots that hold the same prefix") {
    const auto a_hist = std::pair<std::string, std::uint64_t>{"a-history", 5000};
    const auto b_hist = std::pair<std::string, std::uint64_t>{"b-history", 5000};
    check({
        {"a session goes back to its own slot when another holds the same prefix",
         {backend({of_session(idle(0, {sys, doc_a, q1}), 7),
                   of_session(idle(1, {sys, doc_a, q1}), 9), idle(2)})},
         in_session(doc_a_q2, 9),
         {0, 1, route::hit, 2, 20200}},
        {"without a hint the slot that holds less beyond the match is reused",
         {backend({idle(0, {sys, doc_a, a_hist}), idle(1, {sys, doc_a, q1}), idle(2)})},
         doc_a_q2,
         {0, 1, route::hit, 2, 20200}},
        {"a new session takes the copy no other session ran last",
         {backend({of_session(idle(0, {sys, doc_a, q1}), 7), idle(1, {sys, doc_a, q2}), idle(2)})},
         in_session(request({sys, doc_a, {"q3", 100}}, 2), 11),
         {0, 1, route::hit, 2, 20200}},
        {"between two other sessions' copies, the one used least recently",
         {backend({of_session(idle(0, {sys, doc_a, a_hist}), 7, 10),
                   of_session(idle(1, {sys, doc_a, b_hist}), 8, 300), idle(2)})},
         in_session(request({sys, doc_a, {"q3", 100}}, 2), 11),
         {0, 1, route::hit, 2, 20200}},
        {"a hint never beats a longer match",
         {backend({of_session(idle(0, {sys, doc_a, q1, a1}), 7),
                   of_session(idle(1, {sys, doc_a}), 9), idle(2)})},
         in_session(request({sys, doc_a, q1, a1, q2}, 4), 9),
         {0, 0, route::hit, 4, 20600}},
    });
}

namespace {

rt::fingerprint floating(rt::fingerprint fp) {
    fp.floating = true;
    return fp;
}

}  // namespace

TEST_CASE("planner: floating requests go where llama-server's own slot choice puts them") {
    check({
        {"the slot that shares the most of the prompt",
         {backend({idle(0, {sys, q1}), idle(1, {sys, doc_a, q1}), idle(2)})},
         floating(doc_a_q2),
         {0, 1, route::hit, 2, 20200}},
        {"equal shares: the lower id",
         {backend({idle(0, {sys, doc_a, q1}), idle(1, {sys, doc_a, q1}), idle(2)})},
         floating(doc_a_q2),
         {0, 0, route::hit, 2, 20200}},
        {"a share under the similarity threshold does not count: the least recently used slot",
         {backend({valued(0, 100, 0, 10), valued(1, 50000, 5, 500), busy(2, {{"other", 100}})})},
         floating(request({sys, doc_b, q1}, 2)),
         {0, 1, route::miss_new_prefix}},
        {"never used slots are the least recent; among them the higher id, as llama-server loops",
         {backend({idle(0), idle(1), valued(2, 100, 0, 10)})},
         floating(doc_a_q2),
         {0, 1, route::miss_new_prefix}},
        {"no idle slot: llama-server queues it, no slot planned",
         {backend({busy(0, {sys, doc_a, q1}), busy(1)})},
         floating(doc_a_q2),
         {0, std::nullopt, route::miss_slot_busy}},
        {"a short one-off takes no scratch slot: llama-server does not know it",
         {backend({idle(0, {{"sysX", 200}, {"hi", 100}}), idle(1)})},
         floating(one_off),
         {0, 0, route::hit, 1, 200}},
    });
}

namespace {

rt::slot_view unknown(int id, std::uint64_t tokens) {
    rt::slot_view s = idle(id);
    s.held_tokens = tokens;  // what GET /slots shows, the levels unknown
    return s;
}

std::vector<int> rivals(std::vector<rt::slot_view> slots, int planned,
                        const rt::fingerprint& fp = floating(doc_a_q2)) {
    return rt::floating_rivals(backend(std::move(slots)), planned, fp);
}

}  // namespace

TEST_CASE("planner: the idle slots that would take a floating request from the prepared one") {
    using v = std::vector<int>;
    // Restored or primed: the planned slot holds exactly the prefix (sys, docA).
    CHECK(rivals({idle(0, {sys, doc_a}), idle(1, {sys, doc_a, q1})}, 0) == v{1});
    CHECK(rivals({idle(0, {sys, doc_a, q1}), idle(1, {sys, doc_a})}, 1) == v{0});
    CHECK(rivals({idle(0, {sys, doc_a}), idle(1, {sys, doc_a})}, 1) == v{0});  // tie: lower id
    CHECK(rivals({idle(0, {sys, doc_a}), idle(1, {sys, doc_a})}, 0).empty());
    // Kept with more: another copy with more may share further; an exact copy shares less.
    CHECK(rivals({idle(0, {sys, doc_a, q1}), idle(1, {sys, doc_a, a1})}, 0) == v{1});
    CHECK(rivals({idle(0, {sys, doc_a, q1}), idle(1, {sys, doc_a})}, 0).empty());
    // Sharing fewer levels, another document, empty, or busy: no rival.
    CHECK(rivals({idle(0, {sys, doc_a}), idle(1, {sys, doc_b}), idle(2), busy(3, {sys, doc_a, q1})},
                 0)
              .empty());
    // A request that extends the planned slot's conversation: only a slot sharing as much.
    const auto next = floating(request({sys, doc_a, q1, a1, q2}, 4));
    CHECK(rivals({idle(0, {sys, doc_a, q1, a1}), idle(1, {sys, doc_a, q1})}, 0, next).empty());
    // Unknown content (after a floating request ran somewhere): a rival when long enough to hold
    // what the planned slot shares.
    CHECK(rivals({idle(0, {sys, doc_a}), unknown(1, 20300)}, 0) == v{1});
    CHECK(rivals({idle(0, {sys, doc_a}), unknown(1, 900)}, 0).empty());
    // The planned slot does not hold the prefix: nothing was prepared there.
    CHECK(rivals({idle(0, {sys, doc_b}), idle(1, {sys, doc_a, q1})}, 0).empty());
    CHECK(rivals({idle(0), idle(1, {sys, doc_a, q1})}, 0).empty());
}
