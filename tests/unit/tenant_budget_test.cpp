// Per-tenant disk budgets: the policy as a table, the index applying it, and an index written by
// a warmslot without tenants opening with its files kept.
#include "cache/tenant_budget.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "config/config.hpp"
#include "config_fixtures.hpp"

using namespace warmslot::cache;
namespace fs = std::filesystem;
using keys = std::vector<std::string>;
using index_t = warmslot::cache::index;  // not POSIX's index()

namespace {

// key, tenant, bytes, hits, prefill seconds, last used. value = (hits + 1) * seconds / bytes.
stored_file file(std::string key, std::string tenant, std::uint64_t bytes, std::uint64_t hits,
                 double seconds, std::int64_t last_used = 100) {
    return stored_file{std::move(key), std::move(tenant), bytes, hits, seconds, last_used};
}

}  // namespace

TEST_CASE("a tenant's budget evicts only that tenant's files, worth least first") {
    // a: a1 0.01, a2 0.1, a3 0.005 (lowest); b: b1 0.001 (lowest of all), b2 0.5
    const std::vector<stored_file> files = {
        file("a1", "a", 100, 0, 1.0), file("a2", "a", 100, 9, 1.0),  file("a3", "a", 100, 0, 0.5),
        file("b1", "b", 100, 0, 0.1), file("b2", "b", 100, 0, 50.0), file("d1", "", 100, 0, 0.01),
        file("e0", "a", 0, 0, 0.0),
    };
    struct row {
        const char* what;
        std::string tenant;
        std::uint64_t budget;
        keys pinned;
        keys expected;
    };
    const row rows[] = {
        {"within its budget: nothing", "a", 300, {}, {}},
        {"one over: its least valuable", "a", 250, {}, {"a3"}},
        {"far over: in value order until within", "a", 100, {}, {"a3", "a1"}},
        {"zero: all of its own (an empty file frees nothing)", "a", 0, {}, {"a3", "a1", "a2"}},
        {"pinned files stay, the next goes instead", "a", 200, {"a3"}, {"a1"}},
        {"pinned alone over the budget: what can go, goes", "a", 0, {"a1", "a2"}, {"a3"}},
        {"b over: b's, never a's cheaper ones", "b", 100, {}, {"b1"}},
        {"the default tenant is a tenant too", "", 0, {}, {"d1"}},
        {"a tenant with no files: nothing", "c", 0, {}, {}},
        {"another tenant's pin is irrelevant", "b", 0, {"a3"}, {"b1", "b2"}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(tenant_evictions(files, r.tenant, r.budget, r.pinned) == r.expected);
    }
}

TEST_CASE("a tenant's budget breaks ties by last use, then key; NaN values go first") {
    const std::vector<stored_file> files = {
        file("d", "t", 100, 0, 1.0, 10),
        file("c", "t", 100, 0, 1.0, 10),
        file("a", "t", 100, 0, 1.0, 30),
        file("b", "t", 100, 0, 1.0, 20),
        file("n", "t", 100, 0, std::numeric_limits<double>::quiet_NaN(), 99),
    };
    CHECK(tenant_evictions(files, "t", 0, {}) == keys{"n", "c", "d", "b", "a"});
}

namespace {

struct temp_dir {
    fs::path root, db, slots;
    temp_dir() {
        std::random_device rd;
        root = fs::temp_directory_path() /
               ("warmslot-tenant-test-" + std::to_string(rd()) + std::to_string(rd()));
        db = root / "index.db";
        slots = root / "slots";
        fs::create_directories(slots);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

void write_file(const fs::path& p, std::size_t bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << std::string(bytes, 'x');
}

snapshot make(const std::string& key, const std::string& tenant, std::uint64_t bytes,
              double seconds) {
    snapshot s;
    s.key = key;
    s.identity = "model|b1|np2|c4096";
    s.file = file_name_for(key);
    s.tokens = bytes / 10;
    s.bytes = bytes;
    s.created = s.last_used = 100;
    s.prefill_seconds = seconds;
    s.tenant = tenant;
    return s;
}

void save(index_t& idx, const temp_dir& dir, const snapshot& s) {
    write_file(dir.slots / s.file, static_cast<std::size_t>(s.bytes));
    idx.put(s);
}

void exec(sqlite3* db, const char* sql) {
    REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
}

}  // namespace

TEST_CASE("cache index: a tenant's budget deletes its files and rows, no other tenant's") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    save(idx, dir, make("a1", "a", 100, 1.0));  // a's: worth 0.01
    save(idx, dir, make("b1", "b", 100, 0.1));  // b's: worth 0.001, the least of all
    save(idx, dir, make("b2", "b", 100, 2.0));  // b's: worth 0.02
    save(idx, dir, make("a2", "a", 100, 0.5));  // a's: worth 0.005
    CHECK(idx.find("a2")->tenant == "a");
    CHECK(idx.enforce_tenant_budget("a", 100, {"a2"}) == keys{"a1"});
    CHECK_FALSE(fs::exists(dir.slots / file_name_for("a1")));
    CHECK(fs::exists(dir.slots / file_name_for("b1")));
    CHECK(idx.enforce_tenant_budget("b", 150, {}) == keys{"b1"});
    keys left;
    for (const auto& s : idx.all()) left.push_back(s.key + ":" + s.tenant);
    CHECK(left == keys{"a2:a", "b2:b"});
    // Another tenant restoring a file does not change whom it is charged to.
    idx.touch("b2", 200, 5.0);
    CHECK(idx.find("b2")->tenant == "b");
}

TEST_CASE(
    "cache index: an index of schema version 1 opens, keeps its files, charges them to the "
    "default tenant") {
    temp_dir dir;
    {
        // What a warmslot without tenants wrote (migration 1 exactly as released).
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(dir.db.c_str(), &db) == SQLITE_OK);
        exec(db, "PRAGMA journal_mode=WAL");
        exec(db, "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
        exec(db,
             "CREATE TABLE snapshots (key TEXT PRIMARY KEY, identity TEXT NOT NULL,"
             " file TEXT NOT NULL, tokens INTEGER NOT NULL, bytes INTEGER NOT NULL,"
             " created INTEGER NOT NULL, last_used INTEGER NOT NULL, hits INTEGER NOT NULL,"
             " save_ms REAL NOT NULL, restore_ms REAL NOT NULL, prefill_seconds REAL NOT NULL);"
             "CREATE INDEX snapshots_last_used ON snapshots(last_used);");
        exec(db, "INSERT INTO meta VALUES ('schema_version', 1)");
        exec(db,
             "INSERT INTO snapshots VALUES ('ab12', 'id', 'ws-ab12.bin', 10, 300, 1, 2, 3,"
             " 1.5, 2.5, 4.0)");
        sqlite3_close(db);
        write_file(dir.slots / "ws-ab12.bin", 300);
    }
    {
        index_t idx(dir.db, dir.slots);
        const auto s = idx.find("ab12");
        REQUIRE(s);
        CHECK(s->tenant.empty());
        CHECK(s->bytes == 300);
        CHECK(s->hits == 3);
        CHECK(s->prefill_seconds == 4.0);
        CHECK(fs::exists(dir.slots / "ws-ab12.bin"));
        save(idx, dir, make("cd34", "a", 100, 1.0));
        CHECK(idx.enforce_tenant_budget("a", 1000, {}).empty());
        CHECK(idx.enforce_tenant_budget("", 0, {}) == keys{"ab12"});  // the default tenant's
    }
    // Reopened: version 2, nothing migrated twice.
    index_t again(dir.db, dir.slots);
    CHECK(again.find("cd34")->tenant == "a");
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(dir.db.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name = 'schema_version'", -1, &st,
                               nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(sqlite3_column_int(st, 0) == index_t::schema_version);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

TEST_CASE("config: cache.tenant_max_disk, per tenant and for every other tenant") {
    const std::string head =
        "backends:\n  - name: a\n    url: http://127.0.0.1:8081\n"
        "api_keys:\n  - {key: key-of-a-0001, tenant: a}\n"
        "  - {key: key-of-b-0001, tenant: b}\n";
    const auto c = warmslot::config::parse(
        head + "cache:\n  max_disk: 1GiB\n  tenant_max_disk:\n    a: 100MiB\n    \"*\": 10MiB\n",
        "test.yaml", {});
    CHECK(c.cache.max_disk_of("a") == 100ull << 20);
    CHECK(c.cache.max_disk_of("b") == 10ull << 20);
    CHECK(c.cache.max_disk_of("") == 10ull << 20);
    const auto only =
        warmslot::config::parse(head + "cache:\n  tenant_max_disk: {b: 2MiB}\n", "test.yaml", {});
    CHECK(only.cache.max_disk_of("b") == 2ull << 20);
    CHECK_FALSE(only.cache.max_disk_of("a"));
    CHECK_FALSE(only.cache.max_disk_of(""));
    CHECK_FALSE(warmslot::config::parse(head, "test.yaml", {}).cache.max_disk_of("a"));

    const std::vector<warmslot::test::bad_case> bad = {
        {head + "cache:\n  tenant_max_disk: 5MiB\n", "cache.tenant_max_disk", 8,
         "expected a map of tenant names to sizes"},
        {head + "cache:\n  tenant_max_disk:\n    c: 5MiB\n", "cache.tenant_max_disk[\"c\"]", 9,
         "no key in api_keys has tenant \"c\""},
        {head + "cache:\n  tenant_max_disk:\n    \"a b\": 5MiB\n", "cache.tenant_max_disk[\"a b\"]",
         9, "must be a tenant name"},
        {head + "cache:\n  tenant_max_disk:\n    a: 5KiB\n", "cache.tenant_max_disk[\"a\"]", 9,
         "must be from 1MiB"},
        {head + "cache:\n  tenant_max_disk:\n    a: lots\n", "cache.tenant_max_disk[\"a\"]", 9,
         "invalid size"},
        {head + "cache:\n  tenant_max_disk:\n    a: 2GiB\n  max_disk: 1GiB\n",
         "cache.tenant_max_disk[\"a\"]", 9, "must not exceed cache.max_disk (1GiB)"},
    };
    for (const auto& b : bad) {
        warmslot::test::check_rejected(b, [](const std::string& yaml) {
            return warmslot::config::parse(yaml, "test.yaml", {});
        });
    }
}
