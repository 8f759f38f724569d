// The routing planner against random scenarios (seeded, reproducible): whatever it is given,
// it never pins a busy slot and only picks healthy backends that serve the model.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "planner_fixtures.hpp"

using namespace planner_fixtures;

namespace {

// A small deterministic generator (raw mt19937_64 output, same on every standard library).
struct dice {
    std::mt19937_64 engine;
    std::uint64_t below(std::uint64_t n) { return engine() % n; }
    bool coin() { return below(2) == 0; }
};

const std::vector<segments>& segment_pool() {
    static const std::vector<segments> pool{
        {},
        {sys},
        {sys, doc_a},
        {sys, doc_a, q1},
        {sys, doc_a, q2},
        {sys, doc_b, q1},
        {{"sysX", 200}, {"hello", 100}},
        {{"other", 300}},
        {sys, doc_a, q1, a1, q2},
    };
    return pool;
}

rt::slot_view random_slot(dice& d, int id) {
    const auto& pool = segment_pool();
    const auto held = pool[d.below(pool.size())];
    rt::slot_view s =
        d.coin() ? idle(id, held) : busy(id, held, static_cast<double>(d.below(60)) - 10);
    s.recent_hits = static_cast<double>(d.below(4));
    s.last_use = now - seconds(static_cast<long>(d.below(1000)));
    s.scratch = d.below(8) == 0;
    return s;
}

rt::backend_view random_backend(dice& d) {
    std::vector<rt::slot_view> slots;
    const auto n = d.below(5);
    for (std::uint64_t i = 0; i < n; ++i) slots.push_back(random_slot(d, static_cast<int>(i)));
    std::vector<std::string> models;
    if (d.below(3) == 0) models.push_back(d.coin() ? "qwen" : "llama");
    rt::backend_view b = backend(std::move(slots), d.below(4), models);
    b.healthy = d.below(6) != 0;
    b.pinning = d.below(5) != 0;
    b.tokens_per_byte = 0.2 + static_cast<double>(d.below(10)) / 10;
    b.prefill_tokens_per_second = 100 + static_cast<double>(d.below(3000));
    return b;
}

scenario random_scenario(dice& d) {
    scenario s;
    const auto n = 1 + d.below(3);
    for (std::uint64_t i = 0; i < n; ++i) s.backends.push_back(random_backend(d));
    const auto& pool = segment_pool();
    if (d.below(8) != 0) {
        const auto& segs = pool[1 + d.below(pool.size() - 1)];
        s.fp = request(segs, d.below(segs.size() + 1));
    }
    const std::string_view models[] = {"", "", "qwen", "llama", "gemma"};
    s.model = models[d.below(5)];
    s.settings.scratch_slot = d.below(4) != 0;
    s.settings.max_wait_seconds = static_cast<double>(d.below(40));
    return s;
}

void check_invariants(const scenario& s, const rt::plan& p) {
    REQUIRE(p.backend >= -1);
    if (p.backend < 0) {
        CHECK_FALSE(p.slot.has_value());
        return;
    }
    const auto& b = s.backends[static_cast<std::size_t>(p.backend)];
    CHECK(b.healthy);
    CHECK(rt::serves(b, s.model));
    CHECK_FALSE(p.unknown_model);
    if (!p.slot) {
        CHECK(p.why != route::hit);
        CHECK(p.why != route::wait_hit);
        CHECK(p.why != route::scratch);
        return;
    }
    CHECK(b.pinning);
    const rt::slot_view* slot = nullptr;
    for (const auto& v : b.slots) {
        if (v.id == *p.slot) slot = &v;
    }
    REQUIRE(slot != nullptr);
    // Never pin a busy slot: only wait_hit names one, and the caller waits until it is idle.
    CHECK(slot->busy == (p.why == route::wait_hit));
    REQUIRE(s.fp.has_value());
    const double request_tokens = static_cast<double>(s.fp->total_bytes) * b.tokens_per_byte;
    CHECK(static_cast<double>(p.expected_cached_tokens) <= request_tokens);
    CHECK(p.matched_levels <= s.fp->levels.size());
}

}  // namespace

TEST_CASE("planner property: never pins a busy slot, only healthy serving backends") {
    dice d{std::mt19937_64{20240601}};
    for (int i = 0; i < 1000; ++i) {
        const scenario s = random_scenario(d);
        CAPTURE(i);
        check_invariants(s, run(s));
    }
}
