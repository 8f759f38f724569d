// Token-prefix keys and the split points learned from traffic, as tables.
#include "cache/token_key.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "cache/split_points.hpp"

using namespace warmslot::cache;

namespace {

// `n` tokens counting up from `from`.
std::vector<int> run(int from, std::size_t n) {
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), from);
    return v;
}

std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_CASE("the key of a prefix depends on exactly its tokens and the identity") {
    const auto doc = run(1000, 300);
    const token_chain a("model-a", cat(doc, run(5, 40)));
    const token_chain b("model-a", cat(doc, run(9000, 500)));
    const token_chain other("model-b", cat(doc, run(5, 40)));
    REQUIRE(a.blocks().size() == 340 / token_block);
    REQUIRE(b.blocks().size() == 800 / token_block);
    for (std::size_t n : {1u, 63u, 64u, 65u, 128u, 299u, 300u}) {
        CAPTURE(n);
        CHECK(a.key_at(n) == b.key_at(n));      // the same first n tokens
        CHECK(a.key_at(n) != other.key_at(n));  // another model's file never matches
    }
    CHECK(a.key_at(301) != b.key_at(301));
    CHECK(a.key_at(340) != b.key_at(340));
    // Every length has its own key: a file of n tokens is never found for n + 1.
    std::set<std::string> keys;
    for (std::size_t n = 0; n <= a.size(); ++n) keys.insert(a.key_at(n));
    CHECK(keys.size() == a.size() + 1);
    CHECK(a.key_at(0).size() == 16);
    CHECK(a.key_at(999) == a.key_at(a.size()));  // clamped
    CHECK(common_blocks(a.blocks(), b.blocks()) == 300 / token_block);
    CHECK(common_blocks(a.blocks(), other.blocks()) == 0);
}

TEST_CASE("a token moved across a block boundary changes every later key") {
    auto t = run(0, 256);
    const token_chain a("m", t);
    std::swap(t[63], t[64]);
    const token_chain b("m", t);
    CHECK(a.key_at(63) == b.key_at(63));
    CHECK(a.key_at(64) != b.key_at(64));
    CHECK(a.key_at(256) != b.key_at(256));
    CHECK(common_blocks(a.blocks(), b.blocks()) == 0);
}

TEST_CASE("split points: where prompts that go on differently part ways") {
    const auto system = run(0, 640);  // 10 blocks every session shares
    const auto session1 = cat(system, run(100'000, 1000));
    const auto session2 = cat(system, run(200'000, 1000));
    const auto turn2 = cat(session1, run(300'000, 500));  // session 1's next turn extends it
    struct row {
        const char* what;
        std::vector<std::vector<int>> before;
        std::vector<int> prompt;
        std::size_t passed;  // blocks
    };
    const row rows[] = {
        {"the first prompt: nothing learned", {}, session1, 0},
        {"the same prompt again: no continuation parts from it", {session1}, session1, 0},
        {"the next turn of one conversation extends it: no split", {session1}, turn2, 0},
        {"two sessions part after the system prompt", {session1}, session2, 10},
        {"a third session passes the learned point",
         {session1, session2},
         cat(system, run(400'000, 200)),
         10},
        {"a prompt that stops within a block of the point: no split",
         {session1},
         cat(system, run(500'000, 100)),
         0},
        {"nothing in common", {session1}, run(900'000, 2000), 0},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        split_points sp;
        std::uint64_t now = 1;
        for (const auto& b : r.before) sp.observe("m", token_chain("m", b).blocks(), now++);
        CHECK(sp.observe("m", token_chain("m", r.prompt).blocks(), now) == r.passed);
    }
}

TEST_CASE("split points are per identity, bounded, and learned from files too") {
    const auto system = run(0, 640);
    split_points::limits lim;
    lim.prompts = 4;
    lim.points = 3;
    split_points sp(lim);
    std::uint64_t now = 1;
    sp.observe("a", token_chain("a", cat(system, run(10'000, 500))).blocks(), now++);
    CHECK(sp.observe("b", token_chain("b", cat(system, run(20'000, 500))).blocks(), now++) == 0);
    CHECK(sp.observe("a", token_chain("a", cat(system, run(30'000, 500))).blocks(), now++) == 10);
    // Ten sessions that each share a longer part with one before them: at most 3 points kept,
    // at most 4 prompts remembered.
    for (int i = 0; i < 10; ++i) {
        const auto shared = run(50'000 + i * 10'000, 640);
        sp.observe("c", token_chain("c", cat(shared, run(1'000'000 + i * 5000, 300))).blocks(),
                   now++);
        sp.observe("c", token_chain("c", cat(shared, run(2'000'000 + i * 5000, 300))).blocks(),
                   now++);
    }
    CHECK(sp.points("c") == 3);
    // A file's end is a point: a prompt that passes it finds it.
    const token_chain file("d", run(7, 64 * 40));
    sp.add("d", file.blocks()[29], 30, now++);
    CHECK(sp.longest_passed("d", token_chain("d", cat(run(7, 64 * 30), run(1, 10))).blocks()) ==
          30);
    CHECK(sp.longest_passed("d", token_chain("d", run(7, 64 * 29)).blocks()) == 0);
}

TEST_CASE("split points: observe reports the points it makes, once") {
    const auto system = run(0, 640);
    split_points sp;
    std::vector<split_points::made> made;
    sp.observe("m", token_chain("m", cat(system, run(10'000, 500))).blocks(), 1, &made);
    CHECK(made.empty());
    const token_chain second("m", cat(system, run(20'000, 500)));
    sp.observe("m", second.blocks(), 2, &made);
    REQUIRE(made.size() == 1);
    CHECK(made[0].at == 10);
    CHECK(made[0].hash == second.blocks()[9]);
    made.clear();
    // A third session passes the same point: nothing new to keep.
    CHECK(sp.observe("m", token_chain("m", cat(system, run(30'000, 500))).blocks(), 3, &made) ==
          10);
    CHECK(made.empty());
}

TEST_CASE("key_scope: under isolation a tenant's keys are its own") {
    const std::vector<int> tokens(200, 7);
    const std::string a = "a", b = "b";
    const warmslot::cache::token_chain shared("model-x", tokens);
    const warmslot::cache::token_chain of_a(warmslot::cache::key_scope("model-x", &a), tokens);
    const warmslot::cache::token_chain of_b(warmslot::cache::key_scope("model-x", &b), tokens);
    CHECK(warmslot::cache::key_scope("model-x", nullptr) == "model-x");
    CHECK(shared.key_at(150) == warmslot::cache::token_chain("model-x", tokens).key_at(150));
    CHECK(of_a.key_at(150) != of_b.key_at(150));
    CHECK(of_a.key_at(150) != shared.key_at(150));
    CHECK(of_a.key_at(150) ==
          warmslot::cache::token_chain(warmslot::cache::key_scope("model-x", &a), tokens)
              .key_at(150));
    // The default tenant under isolation is not the unscoped chain either.
    const std::string none;
    CHECK(warmslot::cache::token_chain(warmslot::cache::key_scope("model-x", &none), tokens)
              .key_at(150) != shared.key_at(150));
}
