// The index's rows: finding a file by key or by the longest prefix of a prompt, writing and
// dropping rows (a dropped row's file goes with it), and the learned split points. See
// index.hpp.
#include <string>

#include "cache/index.hpp"
#include "cache/index_sql.hpp"

namespace warmslot::cache {

using namespace index_sql;

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
    static const std::string sql =
        std::string(select_row) + " WHERE identity = ?1 AND tokens <= ?2 ORDER BY tokens DESC";
    statement st(db_, db_path_, "find a prefix", sql.c_str());
    // Shorter than the prompt: a file of the whole prompt leaves a hybrid slot nothing to
    // extend, and llama-server evaluates at least one token anyway.
    if (chain.size() == 0) return std::nullopt;
    st.bind_text(1, identity).bind_uint(2, chain.size() - 1);
    std::uint64_t last = 0;
    std::string want;
    while (st.step()) {
        auto s = read_snapshot(st);
        if (s.tokens != last || want.empty())
            want = chain.key_at(static_cast<std::size_t>(s.tokens));
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
        out.push_back(
            {st.text(0), static_cast<std::uint64_t>(st.integer(1)), st.uinteger(2), st.integer(3)});
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
