#include "cache/index.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "cache/tenant_budget.hpp"

namespace warmslot::cache {
namespace {

namespace fs = std::filesystem;

// Migration i takes the schema from version i to i + 1. Append only: a released step never
// changes, because databases in the field have already run it.
constexpr const char* migrations[] = {
    // 1: the snapshots table.
    "CREATE TABLE snapshots ("
    "  key TEXT PRIMARY KEY,"
    "  identity TEXT NOT NULL,"
    "  file TEXT NOT NULL,"
    "  tokens INTEGER NOT NULL,"
    "  bytes INTEGER NOT NULL,"
    "  created INTEGER NOT NULL,"
    "  last_used INTEGER NOT NULL,"
    "  hits INTEGER NOT NULL,"
    "  save_ms REAL NOT NULL,"
    "  restore_ms REAL NOT NULL,"
    "  prefill_seconds REAL NOT NULL);"
    "CREATE INDEX snapshots_last_used ON snapshots(last_used);",
    // 2: the tenant a file is charged to; files of older versions belong to the default one.
    "ALTER TABLE snapshots ADD COLUMN tenant TEXT NOT NULL DEFAULT '';"
    "CREATE INDEX snapshots_tenant ON snapshots(tenant);",
    // 3: split points learned from traffic (cache/split_points.hpp).
    "CREATE TABLE split_points ("
    "  identity TEXT NOT NULL,"
    "  hash INTEGER NOT NULL,"
    "  blocks INTEGER NOT NULL,"
    "  last_passed INTEGER NOT NULL,"
    "  PRIMARY KEY (identity, hash));",
};
static_assert(std::size(migrations) == index::schema_version);

constexpr const char* select_row =
    "SELECT key, identity, file, tokens, bytes, created, last_used, hits, save_ms, restore_ms,"
    " prefill_seconds, tenant FROM snapshots";

[[noreturn]] void fail(sqlite3* db, const fs::path& path, std::string_view op) {
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
void exec_sql(sqlite3* db, const fs::path& path, const char* sql) {
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

snapshot read_snapshot(const statement& st) {
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

bool is_valid_key(const std::string& key) {
    if (key.empty() || key.size() > 64) return false;
    return std::all_of(key.begin(), key.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "ws-*<suffix>": finished slot files end in ".bin", unfinished ones in ".bin.tmp".
bool named_like(std::string_view name, std::string_view suffix) {
    return name.size() >= 3 + suffix.size() && name.starts_with("ws-") && name.ends_with(suffix);
}

// A missing file is fine (already gone); anything else is an error worth hearing about.
void remove_file(const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
    if (ec) throw std::runtime_error("index: cannot delete " + p.string() + ": " + ec.message());
}

struct candidate {
    std::string key;
    std::uint64_t bytes = 0;
    double value = 0;  // prefill seconds saved per byte
    std::int64_t last_used = 0;
};

// Lowest value first, then least recently used, then key: the same rows always go first.
bool evict_before(const candidate& a, const candidate& b) {
    if (a.value != b.value) return a.value < b.value;
    if (a.last_used != b.last_used) return a.last_used < b.last_used;
    return a.key < b.key;
}

double value_of(std::uint64_t hits, double prefill_seconds, std::uint64_t bytes) {
    const double v = (static_cast<double>(hits) + 1) * prefill_seconds / static_cast<double>(bytes);
    // Corrupt metadata (NaN) must not break the ordering; such a row is worth nothing.
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
}

}  // namespace

std::string file_name_for(const std::string& key) {
    if (!is_valid_key(key)) {
        throw std::invalid_argument("invalid snapshot key (length " + std::to_string(key.size()) +
                                    "): expected 1 to 64 lower-case hex digits");
    }
    return "ws-" + key + ".bin";
}

index::index(const std::filesystem::path& db_path, std::filesystem::path slot_dir)
    : db_path_(db_path), slot_dir_(std::move(slot_dir)) {
    try {
        open();
        migrate();
        reconcile();
    } catch (...) {
        sqlite3_close_v2(db_);
        db_ = nullptr;
        throw;
    }
}

index::~index() { sqlite3_close_v2(db_); }

void index::open() {
    const auto utf8 = db_path_.u8string();  // SQLite takes UTF-8 paths on every platform
    if (sqlite3_open_v2(reinterpret_cast<const char*>(utf8.c_str()), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
        fail(db_, db_path_, "open");
    }
    if (sqlite3_busy_timeout(db_, 5000) != SQLITE_OK) fail(db_, db_path_, "set busy_timeout");
    statement wal(db_, db_path_, "set journal_mode", "PRAGMA journal_mode=WAL");
    const std::string mode = wal.step() ? wal.text(0) : std::string();
    if (mode != "wal") {
        throw std::runtime_error("index " + db_path_.string() +
                                 ": cannot use WAL journal mode (got '" + mode + "')");
    }
    exec("PRAGMA synchronous=NORMAL");
}

int index::stored_version() const {
    exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
    statement st(db_, db_path_, "read schema version",
                 "SELECT value FROM meta WHERE name = 'schema_version'");
    if (!st.step()) return 0;
    const std::int64_t v = st.integer(0);
    if (v < 0 || v > std::numeric_limits<int>::max()) {
        throw std::runtime_error("index " + db_path_.string() + " has an invalid schema version " +
                                 std::to_string(v));
    }
    return static_cast<int>(v);
}

void index::migrate() {
    transaction tx(db_, db_path_);
    const int from = stored_version();
    if (from > schema_version) {
        throw std::runtime_error("index " + db_path_.string() + " has schema version " +
                                 std::to_string(from) + "; this warmslot knows up to " +
                                 std::to_string(schema_version));
    }
    if (from == schema_version) return;  // nothing written: the rollback is a no-op
    for (int v = from; v < schema_version; ++v) exec(migrations[v]);
    statement st(db_, db_path_, "write schema version",
                 "INSERT OR REPLACE INTO meta (name, value) VALUES ('schema_version', ?1)");
    st.bind_int(1, schema_version).run();
    tx.commit();
}

// Rows are written only after llama-server finished the file, and files are deleted only after
// their row, so a crash leaves at most rows without files and files without rows: both go.
void index::reconcile() { delete_unmatched_files(drop_stale_rows()); }

// Drops rows whose file is missing, has another size, or is not named after the key. Returns
// the file names of the rows that stay.
std::unordered_set<std::string> index::drop_stale_rows() {
    std::unordered_set<std::string> kept;
    std::vector<std::string> stale;
    transaction tx(db_, db_path_);
    {
        statement rows(db_, db_path_, "reconcile", "SELECT key, file, bytes FROM snapshots");
        while (rows.step()) {
            const std::string key = rows.text(0);
            const std::string file = rows.text(1);
            std::error_code ec;
            const bool named_right = is_valid_key(key) && file == file_name_for(key);
            const auto size = named_right ? fs::file_size(slot_dir_ / file, ec) : 0;
            if (named_right && !ec && size == rows.uinteger(2)) {
                kept.insert(file);
            } else {
                stale.push_back(key);
            }
        }
    }
    statement del(db_, db_path_, "reconcile", "DELETE FROM snapshots WHERE key = ?1");
    for (const auto& key : stale) {
        del.bind_text(1, key).run();
        del.reset();
    }
    tx.commit();
    return kept;
}

// Deletes "ws-*.bin" files without a row and "ws-*.bin.tmp" leftovers; nothing else.
void index::delete_unmatched_files(const std::unordered_set<std::string>& kept) {
    std::error_code ec;
    if (!fs::is_directory(slot_dir_, ec)) return;  // no directory, no files
    for (const auto& entry : fs::directory_iterator(slot_dir_)) {
        if (!entry.is_regular_file()) continue;
        const std::string name = entry.path().filename().string();
        if ((named_like(name, ".bin") && !kept.contains(name)) || named_like(name, ".bin.tmp")) {
            remove_file(entry.path());
        }
    }
}

std::size_t index::sweep_unindexed(const std::vector<std::string>& held) {
    std::lock_guard lock(mu_);
    std::unordered_set<std::string> kept;
    {
        statement rows(db_, db_path_, "sweep", "SELECT file FROM snapshots");
        while (rows.step()) kept.insert(rows.text(0));
    }
    for (const auto& key : held) {
        if (is_valid_key(key)) kept.insert(file_name_for(key));
    }
    std::size_t deleted = 0;
    std::error_code ec;
    if (!fs::is_directory(slot_dir_, ec)) return 0;
    for (const auto& entry : fs::directory_iterator(slot_dir_, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        const std::string name = entry.path().filename().string();
        if (!named_like(name, ".bin") || kept.contains(name)) continue;
        fs::remove(entry.path(), ec);  // gone already, or not ours to delete: tried again later
        if (!ec) ++deleted;
    }
    return deleted;
}

void index::exec(const char* sql) const { exec_sql(db_, db_path_, sql); }

std::optional<snapshot> index::find(const std::string& key) const {
    std::lock_guard lock(mu_);
    static const std::string sql = std::string(select_row) + " WHERE key = ?1";
    statement st(db_, db_path_, "find", sql.c_str());
    st.bind_text(1, key);
    if (!st.step()) return std::nullopt;
    return read_snapshot(st);
}

std::optional<snapshot> index::longest_prefix(const std::string& identity,
                                              const token_chain& chain) const {
    std::lock_guard lock(mu_);
    static const std::string sql = std::string(select_row) +
                                   " WHERE identity = ?1 AND tokens <= ?2 ORDER BY tokens DESC";
    statement st(db_, db_path_, "find a prefix", sql.c_str());
    // Shorter than the prompt: a file of the whole prompt leaves a hybrid slot nothing to
    // extend, and llama-server evaluates at least one token anyway.
    if (chain.size() == 0) return std::nullopt;
    st.bind_text(1, identity).bind_uint(2, chain.size() - 1);
    std::uint64_t last = 0;
    std::string want;
    while (st.step()) {
        auto s = read_snapshot(st);
        if (s.tokens != last || want.empty()) want = chain.key_at(static_cast<std::size_t>(s.tokens));
        last = s.tokens;
        if (s.key == want) return s;
    }
    return std::nullopt;
}

void index::put(const snapshot& s) {
    if (s.file != file_name_for(s.key)) {
        throw std::invalid_argument("snapshot file name must be file_name_for(key)");
    }
    std::lock_guard lock(mu_);
    statement st(db_, db_path_, "put",
                 "INSERT OR REPLACE INTO snapshots (key, identity, file, tokens, bytes, created,"
                 " last_used, hits, save_ms, restore_ms, prefill_seconds, tenant)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
    st.bind_text(1, s.key).bind_text(2, s.identity).bind_text(3, s.file);
    st.bind_uint(4, s.tokens).bind_uint(5, s.bytes).bind_int(6, s.created);
    st.bind_int(7, s.last_used).bind_uint(8, s.hits).bind_real(9, s.save_ms);
    st.bind_real(10, s.restore_ms).bind_real(11, s.prefill_seconds).bind_text(12, s.tenant);
    st.run();
    changes_.fetch_add(1, std::memory_order_release);
}

void index::drop(const std::string& key) {
    std::lock_guard lock(mu_);
    drop_locked(key);
}

// Row first, then file: a crash in between leaves an orphan file, which open() deletes.
void index::drop_locked(const std::string& key) {
    const std::string file = file_name_for(key);
    statement st(db_, db_path_, "drop", "DELETE FROM snapshots WHERE key = ?1");
    st.bind_text(1, key).run();
    changes_.fetch_add(1, std::memory_order_release);
    remove_file(slot_dir_ / file);
}

void index::touch(const std::string& key, std::int64_t now, double restore_ms) {
    std::lock_guard lock(mu_);
    statement st(db_, db_path_, "touch",
                 "UPDATE snapshots SET hits = hits + 1, last_used = ?1, restore_ms = ?2"
                 " WHERE key = ?3");
    st.bind_int(1, now).bind_real(2, restore_ms).bind_text(3, key).run();
    changes_.fetch_add(1, std::memory_order_release);
}

std::uint64_t index::total_bytes() const {
    std::lock_guard lock(mu_);
    statement st(db_, db_path_, "total_bytes", "SELECT COALESCE(SUM(bytes), 0) FROM snapshots");
    return st.step() ? st.uinteger(0) : 0;
}

std::vector<std::string> index::enforce_budget(std::uint64_t budget,
                                               const std::vector<std::string>& pinned) {
    std::lock_guard lock(mu_);
    std::vector<candidate> rows;
    std::uint64_t total = 0;
    {
        statement st(db_, db_path_, "enforce_budget",
                     "SELECT key, bytes, hits, prefill_seconds, last_used FROM snapshots");
        while (st.step()) {
            candidate c{st.text(0), st.uinteger(1), 0, st.integer(4)};
            total += c.bytes;
            if (c.bytes == 0) continue;  // frees nothing
            c.value = value_of(st.uinteger(2), st.real(3), c.bytes);
            rows.push_back(std::move(c));
        }
    }
    std::sort(rows.begin(), rows.end(), evict_before);
    const std::unordered_set<std::string> keep(pinned.begin(), pinned.end());
    std::vector<std::string> dropped;
    for (const auto& c : rows) {
        if (total <= budget) break;
        if (keep.contains(c.key)) continue;
        drop_locked(c.key);
        total -= c.bytes;
        dropped.push_back(c.key);
    }
    return dropped;
}

std::vector<std::string> index::enforce_tenant_budget(const std::string& tenant,
                                                      std::uint64_t budget,
                                                      const std::vector<std::string>& pinned) {
    std::lock_guard lock(mu_);
    std::vector<stored_file> files;
    {
        statement st(db_, db_path_, "enforce_tenant_budget",
                     "SELECT key, bytes, hits, prefill_seconds, last_used FROM snapshots"
                     " WHERE tenant = ?1");
        st.bind_text(1, tenant);
        while (st.step()) {
            files.push_back(stored_file{st.text(0), tenant, st.uinteger(1), st.uinteger(2),
                                        st.real(3), st.integer(4)});
        }
    }
    auto dropped = tenant_evictions(files, tenant, budget, pinned);
    for (const auto& key : dropped) drop_locked(key);
    return dropped;
}

void index::put_split(const split_row& r, std::size_t keep) {
    std::lock_guard lock(mu_);
    transaction tx(db_, db_path_);
    {
        statement put(db_, db_path_, "put a split point",
                      "INSERT OR REPLACE INTO split_points (identity, hash, blocks, last_passed)"
                      " VALUES (?1, ?2, ?3, ?4)");
        // The hash is stored as its two's complement: SQLite integers are signed.
        put.bind_text(1, r.identity)
            .bind_int(2, static_cast<std::int64_t>(r.hash))
            .bind_uint(3, r.blocks)
            .bind_int(4, r.last_passed)
            .run();
        statement trim(db_, db_path_, "trim split points",
                       "DELETE FROM split_points WHERE identity = ?1 AND hash NOT IN"
                       " (SELECT hash FROM split_points WHERE identity = ?1"
                       "  ORDER BY last_passed DESC LIMIT ?2)");
        trim.bind_text(1, r.identity).bind_uint(2, keep).run();
    }
    tx.commit();
}

std::vector<split_row> index::splits() const {
    std::lock_guard lock(mu_);
    statement st(db_, db_path_, "read split points",
                 "SELECT identity, hash, blocks, last_passed FROM split_points"
                 " ORDER BY last_passed");
    std::vector<split_row> out;
    while (st.step()) {
        out.push_back({st.text(0), static_cast<std::uint64_t>(st.integer(1)), st.uinteger(2),
                       st.integer(3)});
    }
    return out;
}

std::vector<snapshot> index::all() const {
    std::lock_guard lock(mu_);
    static const std::string sql = std::string(select_row) + " ORDER BY key";
    statement st(db_, db_path_, "all", sql.c_str());
    std::vector<snapshot> out;
    while (st.step()) out.push_back(read_snapshot(st));
    return out;
}

}  // namespace warmslot::cache
