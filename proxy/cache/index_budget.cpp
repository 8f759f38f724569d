// The index's evictions: the files of least value per byte go first until the directory, or
// one tenant's share of it, fits its budget. See index.hpp (enforce_budget).
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "cache/index.hpp"
#include "cache/index_sql.hpp"
#include "cache/tenant_budget.hpp"

namespace warmslot::cache {
namespace {

using namespace index_sql;

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

}  // namespace warmslot::cache
