// Restore or roll back: the choice and what it learns, as tables.
#include "cache/rollback.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace warmslot::cache;

TEST_CASE("restore when the rollback's recomputation costs more than reading the file") {
    struct row {
        const char* what;
        rollback_costs c;
        bool restore;
    };
    const row rows[] = {
        {"nothing learned: a rollback is free", {0, 1000, 8'000'000, 800e6}, false},
        {"a few tokens: below the floor", {31, 10, 1000, 1e9}, false},
        {"the whole document on a fast disk", {7000, 1500, 8'000'000, 800e6}, true},
        {"slow disk, fast prefill: rolling back is cheaper",
         {520, 5000, 4'000'000'000, 200e6},
         false},
        {"equal costs within the margin: kept", {1000, 1000, 1'000'000'000, 1.1e9}, false},
        {"unknown restore speed: an assumed 500 MB/s", {2000, 1000, 100'000'000, 0}, true},
        {"unknown restore speed, huge file", {2000, 1000, 5'000'000'000, 0}, false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        const auto choice = choose_restore_or_rollback(r.c);
        CHECK(choice.restore == r.restore);
        CHECK(choice.why.find("prefix tokens") != std::string::npos);
    }
    const auto c = choose_restore_or_rollback({7000, 1400, 8'000'000, 800e6});
    CHECK(c.rollback_seconds == doctest::Approx(5.0));
    CHECK(c.restore_seconds == doctest::Approx(0.01));
    CHECK(c.why ==
          "a rollback recomputes ~7000 prefix tokens, 5.000 s at 1400 tokens/s; the file "
          "(8.0 MB) restores in 0.010 s at 800 MB/s");
}

TEST_CASE("what a rollback recomputed is learned per prefix, and per backend for new prefixes") {
    rollback_memory m;
    CHECK(m.expected_overshoot("a", 7000) == 0);
    // Prompt 7,040 tokens of which 7,000 are the prefix; 40 computed: rolled back to its end.
    m.observe("a", 7000, 7040, 40);
    CHECK(m.expected_overshoot("a", 7000) == 0);
    CHECK(m.expected_overshoot("b", 7000) == 0);
    // Everything computed again: the whole prefix was the rollback's.
    m.observe("b", 7000, 7040, 7040);
    CHECK(m.expected_overshoot("b", 7000) == 7000);
    CHECK(m.expected_overshoot("a", 7000) == 0);  // its own observation wins
    // A new prefix gets the backend's moving fraction: 0.3 of the last (1.0) after a 0.
    CHECK(m.expected_overshoot("c", 1000) == doctest::Approx(300));
    // Part of it: rolled back 520 tokens before the prefix's end.
    m.observe("a", 7000, 7040, 560);
    CHECK(m.expected_overshoot("a", 7000) == 520);
    // Ignored: no prefix, or a prompt that does not extend it.
    m.observe("d", 0, 100, 100);
    m.observe("d", 7000, 7000, 1);
    CHECK(m.expected_overshoot("d", 0) == 0);
}

TEST_CASE("the learned prefixes are bounded") {
    rollback_memory m;
    for (std::size_t i = 0; i < rollback_memory::max_prefixes * 3; ++i) {
        m.observe("k" + std::to_string(i), 1000, 1100, 1100);
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rollback_memory::max_prefixes * 3; ++i) {
        // Seen keys answer their own 1,000; forgotten ones the backend's fraction (1.0 as well):
        // count through a prefix size the fraction cannot give exactly.
        kept += m.expected_overshoot("k" + std::to_string(i), 999) == 1000 ? 1 : 0;
    }
    CHECK(kept <= rollback_memory::max_prefixes);
    CHECK(kept > 0);
}

TEST_CASE("restore speed: measured, else the file's save speed, else unknown") {
    restore_rate r;
    CHECK(r.estimate(8'000'000, 0) == 0);
    CHECK(r.estimate(8'000'000, 10) == doctest::Approx(800e6));
    r.observe(8'000'000, 4);
    CHECK(r.estimate(8'000'000, 10) == doctest::Approx(2e9));
    r.observe(8'000'000, 0);  // no timing: ignored
    CHECK(r.estimate(1, 1) == doctest::Approx(2e9));
    r.observe(8'000'000, 8);
    CHECK(r.estimate(1, 1) == doctest::Approx(0.7 * 2e9 + 0.3 * 1e9));
}

TEST_CASE("rollback prior: a hybrid model without context checkpoints recomputes all of P") {
    CHECK(rollback_prior(true, 0L) == 1.0);
    CHECK_FALSE(rollback_prior(true, 8L));            // checkpoints: learned
    CHECK_FALSE(rollback_prior(true, std::nullopt));  // the server's default (8): learned
    CHECK_FALSE(rollback_prior(false, 0L));           // a plain transformer cuts anywhere
    rollback_memory m;
    // Nothing learned: the prior decides, and it makes a restore the choice at once.
    CHECK(m.expected_overshoot("d", 12000, rollback_prior(true, 0L)) == 12000);
    CHECK(m.expected_overshoot("d", 12000) == 0);
    rollback_costs c;
    c.overshoot_tokens = m.expected_overshoot("d", 12000, 1.0);
    c.prefill_tokens_per_second = 1200;
    c.file_bytes = 13'000'000;
    CHECK(choose_restore_or_rollback(c).restore);
    // What was seen wins over the prior: this prefix, then the backend's fraction.
    m.observe("d", 12000, 12040, 40);
    CHECK(m.expected_overshoot("d", 12000, 1.0) == 0);
    CHECK(m.expected_overshoot("e", 5000, 1.0) == 0);
}
