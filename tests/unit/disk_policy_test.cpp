// The disk tier's failure policies and key leases, as tables.
#include "cache/disk_policy.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "cache/leases.hpp"

using namespace warmslot::cache;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE("a failed restore drops its file only when llama-server says the file is unusable") {
    struct row {
        const char* what;
        slot_call_result r;
        restore_failure expected;
    };
    const std::string unusable =
        R"({"error":{"code":400,"message":"Unable to restore slot: No available space in KV cache or invalid slot save file","type":"invalid_request_error"}})";
    const std::string bad_slot =
        R"({"error":{"code":400,"message":"Invalid slot ID","type":"invalid_request_error"}})";
    const row rows[] = {
        {"400 unable to restore", {false, 400, unusable}, restore_failure::drop_file},
        {"400 about the call, not the file", {false, 400, bad_slot}, restore_failure::keep_file},
        {"timeout or dropped connection", {true, 0, ""}, restore_failure::keep_file},
        {"500",
         {false, 500, R"({"error":{"message":"Unable to restore slot"}})"},
         restore_failure::keep_file},
        {"503 loading", {false, 503, "{}"}, restore_failure::keep_file},
        {"501 no slot-save-path", {false, 501, "{}"}, restore_failure::keep_file},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(judge_restore_failure(r.r) == r.expected);
    }
}

TEST_CASE("a failed save evicts files only when the disk is really full") {
    struct row {
        const char* what;
        slot_call_result r;
        std::optional<std::uint64_t> free;
        std::uint64_t need;
        std::uint64_t evict;
    };
    const row rows[] = {
        {"500 and the disk lacks room", {false, 500, "Unable to save slot"}, 1000, 5000, 4000},
        {"500 and nothing free", {false, 500, ""}, 0, 5000, 5000},
        {"500 with room: another cause", {false, 500, ""}, 9000, 5000, 0},
        {"500, free space unknown", {false, 500, ""}, std::nullopt, 5000, 0},
        {"501: saving not supported", {false, 501, ""}, 0, 5000, 0},
        {"timeout or dropped connection", {true, 0, ""}, 0, 5000, 0},
        {"400 bad file name", {false, 400, ""}, 0, 5000, 0},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        const auto d = judge_save_failure(r.r, r.free, r.need);
        CHECK(d.evict_bytes == r.evict);
        CHECK(d.retry() == (r.evict > 0));
    }
}

TEST_CASE("saving backs off exponentially after failures, bounded, and resets on success") {
    const auto t0 = policy_clock::time_point{} + 1000h;
    save_backoff b;
    CHECK(b.allowed(t0));
    CHECK(b.pause() == 0s);
    const std::chrono::seconds expected[] = {10s, 20s, 40s, 80s, 160s, 320s, 600s, 600s, 600s};
    auto now = t0;
    for (const auto p : expected) {
        b.failed(now);
        CHECK(b.pause() == p);
        CHECK_FALSE(b.allowed(now));
        CHECK_FALSE(b.allowed(now + p - 1s));
        CHECK(b.allowed(now + p));
        now += p;
    }
    for (int i = 0; i < 100; ++i) b.failed(now);  // no overflow, still bounded
    CHECK(b.pause() == save_backoff::longest);
    b.succeeded();
    CHECK(b.allowed(now));
    b.failed(now);
    CHECK(b.pause() == save_backoff::first);
}

TEST_CASE("restores are turned off after several useless ones in a row, and come back") {
    const auto t0 = policy_clock::time_point{} + 1000h;
    restore_judge j;
    j.observe_identity("model-a");
    SUBCASE("one useless restore (a date after midnight) changes nothing") {
        CHECK_FALSE(j.record(false, t0));
        CHECK(j.allowed(t0));
        CHECK_FALSE(j.record(true, t0));
        CHECK_FALSE(j.record(false, t0));
        CHECK_FALSE(j.record(false, t0));
        CHECK(j.allowed(t0));  // a useful one in between reset the count
    }
    SUBCASE("three in a row: off for a while, then one trial") {
        CHECK_FALSE(j.record(false, t0));
        CHECK_FALSE(j.record(false, t0));
        CHECK(j.record(false, t0));
        CHECK_FALSE(j.allowed(t0));
        CHECK_FALSE(j.allowed(t0 + restore_judge::first_pause - 1s));
        const auto t1 = t0 + restore_judge::first_pause;
        CHECK(j.allowed(t1));
        // The trial is useless again: off for twice as long.
        CHECK(j.record(false, t1));
        CHECK_FALSE(j.allowed(t1 + 2 * restore_judge::first_pause - 1s));
        const auto t2 = t1 + 2 * restore_judge::first_pause;
        CHECK(j.allowed(t2));
        // The trial works: everything forgotten.
        CHECK_FALSE(j.record(true, t2));
        CHECK(j.allowed(t2));
        CHECK_FALSE(j.record(false, t2));
        CHECK(j.allowed(t2));
    }
    SUBCASE("the pause is bounded") {
        auto now = t0;
        for (int i = 0; i < 40; ++i) {
            j.record(false, now);
            if (!j.allowed(now)) now = j.off_until;
        }
        CHECK(j.off_until - now <= restore_judge::longest_pause);
        j.record(false, now);
        CHECK(j.off_until - now == restore_judge::longest_pause);
    }
    SUBCASE("a backend with another identity (another model or build) starts afresh") {
        for (int i = 0; i < 3; ++i) j.record(false, t0);
        CHECK_FALSE(j.allowed(t0));
        j.observe_identity("model-a");
        CHECK_FALSE(j.allowed(t0));
        j.observe_identity("model-b");
        CHECK(j.allowed(t0));
    }
}

TEST_CASE("a restore is useful when the request reused at least half of it") {
    CHECK(restore_was_useful(10000, 10000));
    CHECK(restore_was_useful(10000, 5000));
    CHECK_FALSE(restore_was_useful(10000, 4999));
    CHECK_FALSE(restore_was_useful(10000, 0));
    CHECK(restore_was_useful(0, 0));
}

TEST_CASE("key leases are counted: a key stays protected until its last lease ends") {
    key_leases leases;
    CHECK(leases.count("aa") == 0);
    auto first = leases.take("aa");
    {
        auto second = leases.take("aa");
        CHECK(leases.count("aa") == 2);
        first.release();  // the first user finishes while the second still restores
        CHECK(leases.count("aa") == 1);
        CHECK(leases.held() == std::vector<std::string>{"aa"});
    }
    CHECK(leases.count("aa") == 0);
    CHECK(leases.held().empty());
    SUBCASE("moving a lease moves the protection, once") {
        auto a = leases.take("bb");
        key_leases::lease b = std::move(a);
        CHECK(leases.count("bb") == 1);
        a.release();  // moved from: nothing
        CHECK(leases.count("bb") == 1);
        b = leases.take("cc");  // assigning ends the old one
        CHECK(leases.count("bb") == 0);
        CHECK(leases.count("cc") == 1);
    }
    SUBCASE("an exclusive lease only when nobody holds the key") {
        auto held = leases.take("dd");
        CHECK_FALSE(leases.take_exclusive("dd"));
        held.release();
        auto mine = leases.take_exclusive("dd");
        REQUIRE(mine);
        CHECK(leases.count("dd") == 1);
        CHECK_FALSE(leases.take_exclusive("dd"));
        CHECK(leases.count("dd") == 1);
    }
}

TEST_CASE("a leased file survives the budget; its file goes once the last lease ends") {
    std::random_device rd;
    const fs::path root =
        fs::temp_directory_path() / ("warmslot-lease-test-" + std::to_string(rd()));
    fs::create_directories(root / "slots");
    {
        index idx(root / "index.db", root / "slots");
        auto put = [&](const std::string& key, std::uint64_t bytes) {
            std::ofstream(root / "slots" / file_name_for(key), std::ios::binary)
                << std::string(bytes, 'x');
            snapshot s;
            s.key = key;
            s.identity = "id";
            s.file = file_name_for(key);
            s.tokens = bytes;
            s.bytes = bytes;
            s.prefill_seconds = 1;
            idx.put(s);
        };
        put("a1", 100);
        put("b2", 100);
        key_leases leases;
        auto restoring = leases.take("a1");  // decided to restore a1
        auto also = leases.take("a1");       // a second request on the same prefix
        restoring.release();                 // the first restore answered
        // Another request's snapshot makes room for itself: a1 is still being restored.
        const auto dropped = idx.enforce_budget(0, leases.held());
        CHECK(dropped == std::vector<std::string>{"b2"});
        CHECK(idx.find("a1"));
        CHECK(fs::exists(root / "slots" / file_name_for("a1")));
        also.release();
        CHECK(idx.enforce_budget(0, leases.held()) == std::vector<std::string>{"a1"});
    }
    std::error_code ec;
    fs::remove_all(root, ec);
}
