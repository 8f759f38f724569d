// cache: the disk tier's settings, its state directory and the shared tier. Command backends'
// slot directories under cache.dir are tested in config_backend_test.cpp, the tenants' budgets
// in tenant_budget_test.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <tuple>

#include "config/config.hpp"
#include "config_fixtures.hpp"

using warmslot::test::bad_case;
using warmslot::test::one_backend;

TEST_CASE("config: cache.slot_call_timeout is a positive duration") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env)
              .cache.slot_call_timeout == std::chrono::minutes(2));
    CHECK(warmslot::config::parse(head + "  slot_call_timeout: 750ms\n", "test.yaml", env)
              .cache.slot_call_timeout == std::chrono::milliseconds(750));
    for (const char* bad :
         {"  slot_call_timeout: 0s\n", "  slot_call_timeout: 10\n", "  slot_call_timeout: 25h\n"}) {
        try {
            warmslot::config::parse(head + bad, "test.yaml", env);
            FAIL("accepted: " << bad);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == "cache.slot_call_timeout");
            CHECK(e.line() == 5);
        }
    }
}

TEST_CASE(
    "config: the shared tier: off by default; an absolute directory apart from slot directories") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head =
        "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n"
        "    slot_save_path: /srv/slots/a\ncache:\n  dir: /srv/state\n";
    const auto off = warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache;
    CHECK(off.shared_dir.empty());
    CHECK(off.shared_max_disk == 50ull * 1024 * 1024 * 1024);
    CHECK(off.shared_timeout == std::chrono::milliseconds(2000));
    const auto on =
        warmslot::config::parse(
            head + "  shared_dir: /mnt/shared/\n  shared_max_disk: 2GiB\n  shared_timeout: 500ms\n",
            "test.yaml", env)
            .cache;
    CHECK(on.shared_dir == "/mnt/shared");
    CHECK(on.shared_max_disk == 2ull * 1024 * 1024 * 1024);
    CHECK(on.shared_timeout == std::chrono::milliseconds(500));
    for (const auto& [bad, path, problem] :
         {std::tuple{"  shared_dir: relative/dir\n", "cache.shared_dir", "absolute"},
          std::tuple{"  shared_dir: /srv/slots/a\n", "cache.shared_dir",
                     "backend a's slot directory"},
          std::tuple{"  shared_dir: /srv/state\n", "cache.shared_dir", "is cache.dir"},
          std::tuple{"  shared_max_disk: 10\n", "cache.shared_max_disk", ""},
          std::tuple{"  shared_timeout: 0s\n", "cache.shared_timeout", ""}}) {
        try {
            warmslot::config::parse(head + bad, "test.yaml", env);
            FAIL("accepted: " << bad);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == path);
            CHECK(e.line() == 7);
            CHECK(std::string(e.what()).find(problem) != std::string::npos);
        }
    }
}

TEST_CASE("config: cache.save_after_answer is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env)
              .cache.save_after_answer);
    CHECK_FALSE(warmslot::config::parse(head + "  save_after_answer: false\n", "test.yaml", env)
                    .cache.save_after_answer);
    CHECK_THROWS_AS(warmslot::config::parse(head + "  save_after_answer: 2\n", "test.yaml", env),
                    warmslot::config::config_error);
}

TEST_CASE("config: cache.conversation_files is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env)
              .cache.conversation_files);
    CHECK_FALSE(warmslot::config::parse(head + "  conversation_files: false\n", "test.yaml", env)
                    .cache.conversation_files);
    CHECK_THROWS_AS(
        warmslot::config::parse(head + "  conversation_files: maybe\n", "test.yaml", env),
        warmslot::config::config_error);
}

TEST_CASE("config: cache.replica_files is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(
        warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache.replica_files);
    CHECK_FALSE(warmslot::config::parse(head + "  replica_files: false\n", "test.yaml", env)
                    .cache.replica_files);
    try {
        warmslot::config::parse(head + "  replica_files: maybe\n", "test.yaml", env);
        FAIL("accepted a non-boolean");
    } catch (const warmslot::config::config_error& e) {
        CHECK(e.key_path() == "cache.replica_files");
        CHECK(e.line() == 5);
    }
}

TEST_CASE("config: cache's unknown keys name the keys it knows") {
    const std::string head = std::string(one_backend) + "cache:\n";  // cache: is line 4
    const bad_case cases[] = {
        {head + "  directory: /x\n", "cache.directory", 5,
         "unknown key; expected one of: enabled, dir, max_disk, min_prefix_tokens, "
         "snapshot_after_uses, save_after_answer, conversation_files, slot_call_timeout, "
         "replica_files, shared_dir, shared_max_disk, shared_timeout, shared_across_tenants, "
         "isolation, tenant_max_disk"},
        {head + "  enabled: true\n  max_disk_bytes: 1GiB\n", "cache.max_disk_bytes", 6,
         "unknown key"},
        {head + "  enabled: true\n  enabled: false\n", "cache.enabled", 6,
         "duplicate key (first at line 5)"},
        {"cache: on\n" + std::string(one_backend), "cache", 1, "expected a map, found a scalar"},
    };
    for (const bad_case& c : cases) {
        warmslot::test::check_rejected_keeping_secrets(c);
    }
}
