#include <doctest/doctest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "slot_file_fixtures.hpp"

namespace fs = std::filesystem;
using slot_file_fixtures::files_in;
using warmslot::cache::file_name_for;
using warmslot::cache::snapshot;
using index_t = warmslot::cache::index;

namespace {

// A fresh directory per test (database + "slots/"), removed at the end.
struct temp_dir {
    fs::path root;
    fs::path db;
    fs::path slots;

    temp_dir() {
        std::random_device rd;
        const auto tag = std::to_string(rd()) + std::to_string(rd());
        root = fs::temp_directory_path() / ("warmslot-index-test-" + tag);
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

    fs::path file(const std::string& key) const { return slots / file_name_for(key); }
};

void write_file(const fs::path& p, std::size_t bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << std::string(bytes, 'x');
}

snapshot make(const std::string& key, std::uint64_t bytes, double prefill_seconds = 1,
              std::uint64_t hits = 0, std::int64_t last_used = 100) {
    snapshot s;
    s.key = key;
    s.identity = "model-a|b1234|np2|c32768";
    s.file = file_name_for(key);
    s.tokens = bytes / 10;
    s.bytes = bytes;
    s.created = 50;
    s.last_used = last_used;
    s.hits = hits;
    s.save_ms = 12.5;
    s.restore_ms = 7.25;
    s.prefill_seconds = prefill_seconds;
    return s;
}

// Writes the file, then the row: the order a completed save uses.
void save(index_t& idx, const temp_dir& dir, const snapshot& s) {
    write_file(dir.file(s.key), static_cast<std::size_t>(s.bytes));
    idx.put(s);
}

std::vector<std::string> keys_of(const index_t& idx) {
    std::vector<std::string> keys;
    for (const auto& s : idx.all()) keys.push_back(s.key);
    return keys;
}

// A second, independent connection for looking at what the index wrote.
struct raw_db {
    sqlite3* db = nullptr;
    explicit raw_db(const fs::path& p) { REQUIRE(sqlite3_open(p.c_str(), &db) == SQLITE_OK); }
    ~raw_db() { sqlite3_close(db); }
    raw_db(const raw_db&) = delete;
    raw_db& operator=(const raw_db&) = delete;

    std::string query(const char* sql) const {
        sqlite3_stmt* st = nullptr;
        REQUIRE(sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK);
        std::string out;
        if (sqlite3_step(st) == SQLITE_ROW) {
            const auto* t = sqlite3_column_text(st, 0);
            out = t ? reinterpret_cast<const char*>(t) : "";
        }
        sqlite3_finalize(st);
        return out;
    }
    void exec(const char* sql) const {
        REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
    }
};

// Every row has its file with the recorded size, and every ws-*.bin has a row.
void check_consistent(const index_t& idx, const temp_dir& dir) {
    const auto rows = idx.all();
    for (const auto& s : rows) {
        const auto p = dir.slots / s.file;
        REQUIRE(fs::exists(p));
        CHECK(fs::file_size(p) == s.bytes);
    }
    for (const auto& name : files_in(dir.slots)) {
        if (!name.starts_with("ws-") || !name.ends_with(".bin")) continue;
        CHECK(std::any_of(rows.begin(), rows.end(),
                          [&](const snapshot& s) { return s.file == name; }));
    }
}

const std::string key_a = "aa01";
const std::string key_b = "bb02";
const std::string key_c = "cc03";
const std::string key_d = "dd04";

}  // namespace

TEST_CASE("cache index: open creates the schema in WAL mode") {
    temp_dir dir;
    {
        index_t idx(dir.db, dir.slots);
        CHECK(idx.all().empty());
        CHECK(idx.total_bytes() == 0);
        CHECK(idx.slot_dir() == dir.slots);
    }
    raw_db raw(dir.db);
    CHECK(raw.query("PRAGMA journal_mode") == "wal");
    CHECK(raw.query("SELECT value FROM meta WHERE name = 'schema_version'") == "3");
    CHECK(raw.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'snapshots'") ==
          "snapshots");
    CHECK(raw.query("SELECT sql FROM sqlite_master WHERE type = 'index'"
                    " AND tbl_name = 'snapshots' AND sql LIKE '%last_used%'") != "");
}

TEST_CASE("cache index: put, find, touch round trip") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    const auto a = make(key_a, 1000, 2.5, 3, 100);
    save(idx, dir, a);

    auto got = idx.find(key_a);
    REQUIRE(got);
    CHECK(got->key == a.key);
    CHECK(got->identity == a.identity);
    CHECK(got->file == "ws-aa01.bin");
    CHECK(got->tokens == a.tokens);
    CHECK(got->bytes == a.bytes);
    CHECK(got->created == a.created);
    CHECK(got->last_used == a.last_used);
    CHECK(got->hits == 3);
    CHECK(got->save_ms == doctest::Approx(12.5));
    CHECK(got->restore_ms == doctest::Approx(7.25));
    CHECK(got->prefill_seconds == doctest::Approx(2.5));
    CHECK_FALSE(idx.find(key_b));

    idx.touch(key_a, 500, 42.0);
    got = idx.find(key_a);
    REQUIRE(got);
    CHECK(got->hits == 4);
    CHECK(got->last_used == 500);
    CHECK(got->restore_ms == doctest::Approx(42.0));
    idx.touch(key_b, 600, 1.0);  // unknown key: nothing to record
    CHECK_FALSE(idx.find(key_b));

    auto replaced = a;
    replaced.bytes = 2000;
    save(idx, dir, replaced);  // INSERT OR REPLACE
    CHECK(idx.all().size() == 1);
    CHECK(idx.total_bytes() == 2000);
    save(idx, dir, make(key_b, 500));
    CHECK(idx.total_bytes() == 2500);
}

TEST_CASE("cache index: put rejects a file name that is not derived from the key") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    auto s = make(key_a, 10);
    s.file = "../escape.bin";
    CHECK_THROWS_AS(idx.put(s), std::invalid_argument);
    s.key = "../x";
    CHECK_THROWS_AS(idx.put(s), std::invalid_argument);
    CHECK(idx.all().empty());
}

TEST_CASE("cache index: reopening keeps the rows") {
    temp_dir dir;
    {
        index_t idx(dir.db, dir.slots);
        save(idx, dir, make(key_a, 100));
        save(idx, dir, make(key_b, 200));
        idx.touch(key_b, 900, 3.0);
    }
    index_t idx(dir.db, dir.slots);
    CHECK(keys_of(idx) == std::vector<std::string>{key_a, key_b});
    CHECK(idx.total_bytes() == 300);
    const auto b = idx.find(key_b);
    REQUIRE(b);
    CHECK(b->hits == 1);
    CHECK(b->last_used == 900);
}

TEST_CASE("cache index: reconcile drops stale rows and deletes only orphan slot files") {
    temp_dir dir;
    {
        index_t idx(dir.db, dir.slots);
        save(idx, dir, make(key_a, 100));  // file will be deleted
        save(idx, dir, make(key_b, 200));  // file will be truncated
        save(idx, dir, make(key_c, 300));  // stays
    }
    fs::remove(dir.file(key_a));
    write_file(dir.file(key_b), 150);
    write_file(dir.file(key_d), 400);  // orphan: no row
    write_file(dir.slots / "ws-ee05.bin.tmp", 10);
    write_file(dir.slots / "other.bin", 10);
    write_file(dir.slots / "notes.txt", 10);
    write_file(dir.slots / "ws-ff06.bin.bak", 10);

    index_t idx(dir.db, dir.slots);
    CHECK(keys_of(idx) == std::vector<std::string>{key_c});
    CHECK(idx.total_bytes() == 300);
    CHECK(files_in(dir.slots) ==
          std::vector<std::string>{"notes.txt", "other.bin", "ws-cc03.bin", "ws-ff06.bin.bak"});
}

TEST_CASE("cache index: a missing slot directory means no files") {
    temp_dir dir;
    {
        index_t idx(dir.db, dir.slots);
        save(idx, dir, make(key_a, 100));
    }
    fs::remove_all(dir.slots);
    index_t idx(dir.db, dir.slots);
    CHECK(idx.all().empty());
}

TEST_CASE("cache index: a database from a newer warmslot is refused") {
    temp_dir dir;
    { index_t idx(dir.db, dir.slots); }
    {
        raw_db raw(dir.db);
        raw.exec("UPDATE meta SET value = 99 WHERE name = 'schema_version'");
    }
    std::string message;
    try {
        index_t idx(dir.db, dir.slots);
    } catch (const std::runtime_error& e) {
        message = e.what();
    }
    CHECK(message ==
          "index " + dir.db.string() + " has schema version 99; this warmslot knows up to 3");
    raw_db raw(dir.db);
    CHECK(raw.query("SELECT value FROM meta WHERE name = 'schema_version'") == "99");
}

TEST_CASE("cache index: a file that is not a database is a clear error") {
    temp_dir dir;
    {
        std::ofstream out(dir.db, std::ios::binary);
        out << std::string(4096, 'z');
    }
    std::string message;
    try {
        index_t idx(dir.db, dir.slots);
    } catch (const std::runtime_error& e) {
        message = e.what();
    }
    CHECK(message.find(dir.db.string()) != std::string::npos);
    CHECK(message.find("not a database") != std::string::npos);
}

TEST_CASE("cache index: enforce_budget drops the lowest value first and respects pins") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    // value = (hits + 1) * prefill_seconds / bytes
    save(idx, dir, make(key_a, 100, 1.0, 0));   // 0.01
    save(idx, dir, make(key_b, 100, 1.0, 9));   // 0.1
    save(idx, dir, make(key_c, 100, 0.5, 0));   // 0.005: lowest, but pinned
    save(idx, dir, make(key_d, 100, 50.0, 0));  // 0.5

    CHECK(idx.enforce_budget(400, {}).empty());  // already within budget

    const auto dropped = idx.enforce_budget(250, {key_c});
    CHECK(dropped == std::vector<std::string>{key_a, key_b});  // stops once at 200 <= 250
    CHECK(keys_of(idx) == std::vector<std::string>{key_c, key_d});
    CHECK(idx.total_bytes() == 200);
    CHECK_FALSE(fs::exists(dir.file(key_a)));
    CHECK_FALSE(fs::exists(dir.file(key_b)));
    CHECK(fs::exists(dir.file(key_c)));
    CHECK(fs::exists(dir.file(key_d)));

    // Everything pinned: nothing can go, even over budget.
    CHECK(idx.enforce_budget(0, {key_c, key_d}).empty());
    CHECK(idx.enforce_budget(0, {}) == std::vector<std::string>{key_c, key_d});
    CHECK(idx.total_bytes() == 0);
}

TEST_CASE("cache index: enforce_budget breaks ties by last use, then key") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    save(idx, dir, make(key_d, 100, 1.0, 0, 10));
    save(idx, dir, make(key_c, 100, 1.0, 0, 10));
    save(idx, dir, make(key_a, 100, 1.0, 0, 30));
    save(idx, dir, make(key_b, 100, 1.0, 0, 20));
    CHECK(idx.enforce_budget(0, {}) == std::vector<std::string>{key_c, key_d, key_b, key_a});
}

TEST_CASE("cache index: drop deletes the row and the file") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    save(idx, dir, make(key_a, 100));
    save(idx, dir, make(key_b, 100));
    idx.drop(key_a);
    CHECK_FALSE(idx.find(key_a));
    CHECK_FALSE(fs::exists(dir.file(key_a)));
    CHECK(fs::exists(dir.file(key_b)));

    fs::remove(dir.file(key_b));
    idx.drop(key_b);  // file already gone: fine
    CHECK(idx.all().empty());
    idx.drop(key_c);  // no row at all: fine
    CHECK_THROWS_AS(idx.drop("../x"), std::invalid_argument);
}

TEST_CASE("cache index: file_name_for accepts only lower-case hex keys of 1 to 64 chars") {
    CHECK(file_name_for("0") == "ws-0.bin");
    CHECK(file_name_for("0123456789abcdef") == "ws-0123456789abcdef.bin");
    CHECK(file_name_for(std::string(64, 'f')) == "ws-" + std::string(64, 'f') + ".bin");
    const std::string bad[] = {"",      "../x",  "ABCD", "abcD", std::string(65, 'a'),
                               "ab/cd", "ab cd", "g1",   "a.b",  std::string("ab\0cd", 5)};
    for (const auto& key : bad) {
        CAPTURE(key);
        CHECK_THROWS_AS(file_name_for(key), std::invalid_argument);
    }
}

TEST_CASE("cache index: after a crash mid-save the index and the directory agree") {
    temp_dir dir;
    {
        index_t idx(dir.db, dir.slots);
        save(idx, dir, make(key_a, 100));
        save(idx, dir, make(key_b, 200));
        // Died after llama-server wrote the file but before the row was inserted.
        write_file(dir.file(key_c), 300);
        // A row whose file disappeared (deleted by hand, or lost with an unsynced directory).
        idx.put(make(key_d, 400));
        // A save that was still writing its temporary file.
        write_file(dir.slots / "ws-ee05.bin.tmp", 50);
    }
    index_t idx(dir.db, dir.slots);
    check_consistent(idx, dir);
    CHECK(keys_of(idx) == std::vector<std::string>{key_a, key_b});
    CHECK(idx.total_bytes() == 300);
    CHECK(files_in(dir.slots) == std::vector<std::string>{"ws-aa01.bin", "ws-bb02.bin"});
}

TEST_CASE("cache index: sweep_unindexed deletes late slot files but keeps rows' and held keys'") {
    temp_dir dir;
    index_t idx(dir.db, dir.slots);
    save(idx, dir, make(key_a, 100));               // indexed: stays
    write_file(dir.file(key_b), 200);               // a save that timed out, written later: goes
    write_file(dir.file(key_c), 300);               // a save under way (its key leased): stays
    write_file(dir.slots / "ws-ee05.bin.tmp", 10);  // not a finished slot file: not touched here
    write_file(dir.slots / "other.bin", 10);        // not warmslot's: never touched

    CHECK(idx.sweep_unindexed({key_c, "not a key"}) == 1);
    CHECK(files_in(dir.slots) ==
          std::vector<std::string>{"other.bin", "ws-aa01.bin", "ws-cc03.bin", "ws-ee05.bin.tmp"});
    CHECK(keys_of(idx) == std::vector<std::string>{key_a});
    // Once the lease ends and no row came, the next sweep takes it too.
    CHECK(idx.sweep_unindexed({}) == 1);
    CHECK(files_in(dir.slots) ==
          std::vector<std::string>{"other.bin", "ws-aa01.bin", "ws-ee05.bin.tmp"});
}

TEST_CASE("index: the longest file holding a prefix of a request's tokens") {
    temp_dir d;
    index_t idx(d.db, d.slots);
    const std::string id = "model-a|b1234|np2|c32768";
    std::vector<int> request(3000);
    for (std::size_t i = 0; i < request.size(); ++i) request[i] = static_cast<int>(i * 7 % 5000);
    const warmslot::cache::token_chain chain(id, request);
    auto put = [&](const warmslot::cache::token_chain& c, std::size_t n,
                   const std::string& identity) {
        auto s = make(c.key_at(n), 1000);
        s.tokens = n;
        s.identity = identity;
        write_file(d.file(s.key), s.bytes);
        idx.put(s);
    };
    CHECK_FALSE(idx.longest_prefix(id, chain));
    put(chain, 1000, id);
    put(chain, 2100, id);
    // Files that do not hold a prefix of this request: another document of the same length,
    // another model's file of the same tokens, a longer prompt.
    std::vector<int> other = request;
    other[2500] += 1;
    put(warmslot::cache::token_chain(id, other), 2600, id);
    put(warmslot::cache::token_chain("model-b", request), 2700, "model-b");
    std::vector<int> longer = request;
    longer.resize(3200, 9);
    put(warmslot::cache::token_chain(id, longer), 3200, id);
    const auto found = idx.longest_prefix(id, chain);
    REQUIRE(found);
    CHECK(found->tokens == 2100);
    CHECK(found->key == chain.key_at(2100));
    // A request that parts from the 2100-token file before its end finds the 1000-token one.
    std::vector<int> parted = request;
    parted[1500] += 1;
    const auto shorter = idx.longest_prefix(id, warmslot::cache::token_chain(id, parted));
    REQUIRE(shorter);
    CHECK(shorter->tokens == 1000);
    // A file of the whole prompt is not a prefix to restore for it.
    std::vector<int> whole(request.begin(), request.begin() + 2100);
    const auto same = idx.longest_prefix(id, warmslot::cache::token_chain(id, whole));
    REQUIRE(same);
    CHECK(same->tokens == 1000);
}

TEST_CASE("index: split points are kept across opens, the most recently passed per identity") {
    temp_dir d;
    {
        index_t idx(d.db, d.slots);
        CHECK(idx.splits().empty());
        // Hashes above 2^63 survive SQLite's signed integers.
        idx.put_split({"a", 0xfedcba9876543210ull, 10, 100}, 2);
        CHECK(idx.splits().at(0).hash == 0xfedcba9876543210ull);
        idx.put_split({"a", 2, 20, 300}, 2);
        idx.put_split({"b", 3, 5, 50}, 2);
        idx.put_split({"a", 4, 30, 200}, 2);  // a's oldest (passed at 100) goes
        idx.put_split({"a", 2, 21, 400}, 2);  // the same point again: replaced, not added
    }
    index_t again(d.db, d.slots);
    const auto rows = again.splits();
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].identity == "b");
    CHECK(rows[1].identity == "a");
    CHECK(rows[1].hash == 4);
    CHECK(rows[1].blocks == 30);
    CHECK(rows[2].hash == 2);
    CHECK(rows[2].blocks == 21);
    CHECK(rows[2].last_passed == 400);
}
