// The index's database and directory as they are opened: the schema and its migrations, and
// the reconciliation of rows with the files beside them. See index.hpp; index_rows.cpp holds
// the reads and writes of rows, index_budget.cpp the evictions.
#include "cache/index.hpp"

#include <sqlite3.h>

#include <limits>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "cache/index_sql.hpp"

namespace warmslot::cache {
namespace {

using namespace index_sql;

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

// "ws-*<suffix>": finished slot files end in ".bin", unfinished ones in ".bin.tmp".
bool named_like(std::string_view name, std::string_view suffix) {
    return name.size() >= 3 + suffix.size() && name.starts_with("ws-") && name.ends_with(suffix);
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

}  // namespace warmslot::cache
