// The index's SQLite plumbing, shared by cache/index*.cpp and internal to cache/: one prepared
// statement, one transaction, errors that name the database, a row read back as a snapshot, and
// the checks on keys and file names.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "cache/index.hpp"

namespace warmslot::cache::index_sql {

namespace fs = std::filesystem;

inline constexpr const char* select_row =
    "SELECT key, identity, file, tokens, bytes, created, last_used, hits, save_ms, restore_ms,"
    " prefill_seconds, tenant FROM snapshots";

[[noreturn]] inline void fail(sqlite3* db, const fs::path& path, std::string_view op) {
    throw std::runtime_error("index " + path.string() + ": " + std::string(op) + ": " +
                             (db ? sqlite3_errmsg(db) : "out of memory"));
}

// One prepared statement, finalized on scope exit. Values only ever reach SQL through bind_*.
class statement {
  public:
    statement(sqlite3* db, const fs::path& path, std::string_view op, const char* sql)
        : db_(db), path_(path), op_(op) {
        if (sqlite3_prepare_v2(db_, sql, -1, &st_, nullptr) != SQLITE_OK) fail(db_, path_, op_);
    }
    ~statement() { sqlite3_finalize(st_); }
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;

    statement& bind_text(int i, const std::string& v) {
        return check(
            sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    statement& bind_int(int i, std::int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
    statement& bind_uint(int i, std::uint64_t v) {
        return bind_int(i, static_cast<std::int64_t>(v));
    }
    statement& bind_real(int i, double v) { return check(sqlite3_bind_double(st_, i, v)); }

    // True while there is a row to read.
    bool step() {
        const int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        fail(db_, path_, op_);
    }
    void run() {
        while (step()) {
        }
    }
    // Ready to run again with new bindings.
    void reset() {
        sqlite3_reset(st_);
        sqlite3_clear_bindings(st_);
    }

    std::string text(int c) const {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, c));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(st_, c)))
                 : std::string();
    }
    std::int64_t integer(int c) const { return sqlite3_column_int64(st_, c); }
    std::uint64_t uinteger(int c) const {
        const std::int64_t v = integer(c);
        return v < 0 ? 0 : static_cast<std::uint64_t>(v);
    }
    double real(int c) const { return sqlite3_column_double(st_, c); }

  private:
    statement& check(int rc) {
        if (rc != SQLITE_OK) fail(db_, path_, op_);
        return *this;
    }

    sqlite3* db_;
    const fs::path& path_;
    std::string_view op_;
    sqlite3_stmt* st_ = nullptr;
};

// Fixed SQL only (pragmas, DDL, transaction control): no values, so no bindings.
inline void exec_sql(sqlite3* db, const fs::path& path, const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) == SQLITE_OK) return;
    const std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw std::runtime_error("index " + path.string() + ": " + sql + ": " + msg);
}

// Rolls back unless commit() ran. IMMEDIATE: take the write lock up front, so two processes
// opening the same database cannot both decide to migrate it.
class transaction {
  public:
    transaction(sqlite3* db, const fs::path& path) : db_(db), path_(path) {
        exec_sql(db_, path_, "BEGIN IMMEDIATE");
    }
    ~transaction() {
        if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    transaction(const transaction&) = delete;
    transaction& operator=(const transaction&) = delete;

    void commit() {
        exec_sql(db_, path_, "COMMIT");
        done_ = true;
    }

  private:
    sqlite3* db_;
    const fs::path& path_;
    bool done_ = false;
};

inline snapshot read_snapshot(const statement& st) {
    snapshot s;
    s.key = st.text(0);
    s.identity = st.text(1);
    s.file = st.text(2);
    s.tokens = st.uinteger(3);
    s.bytes = st.uinteger(4);
    s.created = st.integer(5);
    s.last_used = st.integer(6);
    s.hits = st.uinteger(7);
    s.save_ms = st.real(8);
    s.restore_ms = st.real(9);
    s.prefill_seconds = st.real(10);
    s.tenant = st.text(11);
    return s;
}

inline bool is_valid_key(const std::string& key) {
    if (key.empty() || key.size() > 64) return false;
    return std::all_of(key.begin(), key.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A missing file is fine (already gone); anything else is an error worth hearing about.
inline void remove_file(const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
    if (ec) throw std::runtime_error("index: cannot delete " + p.string() + ": " + ec.message());
}

}  // namespace warmslot::cache::index_sql
