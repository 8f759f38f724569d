// The disk tier's index: which slot files exist, for which backend identity and prefix, and
// what they are worth. SQLite (WAL), one connection guarded by a mutex: thread-safe, blocking.
// Call it from the cache thread, never from an I/O worker.
//
// Files are written by llama-server itself (POST /slots/{id}?action=save) into a directory that
// warmslot also sees. A row is inserted only after the save has completed, so a crash never
// leaves a row pointing at a partial file; open() reconciles rows without files and files
// without rows.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/token_key.hpp"

struct sqlite3;

namespace warmslot::cache {

struct snapshot {
    std::string key;       // content address: the key of its tokens (cache/token_key.hpp)
    std::string identity;  // backend identity (model file, build, slots, context): files never
                           // load into another
    std::string file;      // plain file name inside the slot directory ("ws-<key>.bin")
    std::uint64_t tokens = 0;
    std::uint64_t bytes = 0;
    std::int64_t created = 0;    // unix seconds
    std::int64_t last_used = 0;  // unix seconds
    std::uint64_t hits = 0;      // successful restores
    double save_ms = 0;
    double restore_ms = 0;
    double prefill_seconds = 0;  // what recomputing it would cost (tokens / learned rate)
    std::string tenant;          // whose request wrote it ("" the default tenant): whose disk
                                 // budget it counts against (docs/security.md)
};

// A split point where prompts of `identity` part ways (cache/split_points.hpp): `hash` the chain
// entry of its last block, `blocks` its length in blocks.
struct split_row {
    std::string identity;
    std::uint64_t hash = 0;
    std::uint64_t blocks = 0;
    std::int64_t last_passed = 0;  // unix seconds
};

class index {
  public:
    static constexpr int schema_version = 3;

    // Opens (creating or migrating) the database at `db_path` and reconciles it with the files
    // in `slot_dir` whose names start with "ws-" and end with ".bin": rows whose file is missing
    // or has another size are dropped; such files without a row are deleted. Throws
    // std::runtime_error with a clear message when the database cannot be opened or is newer.
    index(const std::filesystem::path& db_path, std::filesystem::path slot_dir);
    ~index();
    index(const index&) = delete;
    index& operator=(const index&) = delete;

    std::optional<snapshot> find(const std::string& key) const;
    // The longest file of `identity` that holds a proper prefix of `chain`'s tokens: its key is
    // the key of that many of them (cache/token_key.hpp). One query over that identity's rows.
    std::optional<snapshot> longest_prefix(const std::string& identity,
                                           const token_chain& chain) const;
    // Inserts or replaces the row (after the file is complete on disk). s.file must be
    // file_name_for(s.key), else std::invalid_argument.
    void put(const snapshot& s);
    // Drops the row and deletes its file (corrupt, truncated, or evicted). A missing row or file
    // is fine; a key that file_name_for rejects throws std::invalid_argument.
    void drop(const std::string& key);
    // Records a restore: hits+1, last_used, restore_ms.
    void touch(const std::string& key, std::int64_t now, double restore_ms);

    // Total bytes of all files in the index.
    std::uint64_t total_bytes() const;

    // Drops rows (and files) until total_bytes() <= budget: lowest value first, where value is
    // prefill seconds saved per byte ((hits + 1) * prefill_seconds / bytes), then least recently
    // used. Keys in `pinned` (files being restored or saved) are never dropped. Returns the
    // dropped keys.
    std::vector<std::string> enforce_budget(std::uint64_t budget,
                                            const std::vector<std::string>& pinned);

    // Drops `tenant`'s rows (and files), none of another tenant's, until that tenant's files
    // total at most `budget`, in the order of enforce_budget (cache::tenant_evictions). Keys in
    // `pinned` are never dropped. Returns the dropped keys.
    std::vector<std::string> enforce_tenant_budget(const std::string& tenant, std::uint64_t budget,
                                                   const std::vector<std::string>& pinned);

    // Deletes "ws-*.bin" files that have no row, except those of the keys in `held` (a save or
    // restore under way: llama-server may be writing its file now). What it catches: a save that
    // timed out on warmslot's side and that llama-server finished later, whose file would
    // otherwise lie outside the budget until the next start. Returns how many were deleted.
    std::size_t sweep_unindexed(const std::vector<std::string>& held);

    std::vector<snapshot> all() const;
    // Rises with every change to the rows (put, drop, touch, evictions): a listing read at one
    // value is still what all() would return while the value is unchanged. Never locks.
    std::uint64_t changes() const noexcept { return changes_.load(std::memory_order_acquire); }

    // Split points kept with the files, so that a restart does not forget where prompts part
    // ways: inserts or replaces `r`, then keeps that identity's `keep` most recently passed.
    void put_split(const split_row& r, std::size_t keep);
    // Every kept split point, least recently passed first.
    std::vector<split_row> splits() const;

    const std::filesystem::path& slot_dir() const { return slot_dir_; }

  private:
    // Helpers below expect mu_ held (or the constructor running).
    void open();
    int stored_version() const;
    void migrate();
    void reconcile();
    std::unordered_set<std::string> drop_stale_rows();
    void delete_unmatched_files(const std::unordered_set<std::string>& kept);
    void drop_locked(const std::string& key);
    void exec(const char* sql) const;

    mutable std::mutex mu_;
    std::atomic<std::uint64_t> changes_{0};
    sqlite3* db_ = nullptr;
    std::filesystem::path db_path_;
    std::filesystem::path slot_dir_;
};

// "ws-<key>.bin": the only names warmslot gives slot files. Keys are lower-case hex.
std::string file_name_for(const std::string& key);

}  // namespace warmslot::cache
