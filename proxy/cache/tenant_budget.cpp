#include "cache/tenant_budget.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace warmslot::cache {
namespace {

// Prefill seconds saved per byte, as the global budget values a file; NaN is worth nothing.
double value_of(const stored_file& f) {
    const double v =
        (static_cast<double>(f.hits) + 1) * f.prefill_seconds / static_cast<double>(f.bytes);
    return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
}

}  // namespace

std::vector<std::string> tenant_evictions(const std::vector<stored_file>& files,
                                          std::string_view tenant, std::uint64_t budget,
                                          const std::vector<std::string>& pinned) {
    struct candidate {
        const stored_file* file;
        double value;
    };
    std::vector<candidate> own;
    std::uint64_t total = 0;
    for (const auto& f : files) {
        if (f.tenant != tenant) continue;
        total += f.bytes;
        if (f.bytes > 0) own.push_back({&f, value_of(f)});  // an empty file frees nothing
    }
    std::sort(own.begin(), own.end(), [](const candidate& a, const candidate& b) {
        if (a.value != b.value) return a.value < b.value;
        if (a.file->last_used != b.file->last_used) return a.file->last_used < b.file->last_used;
        return a.file->key < b.file->key;
    });
    std::vector<std::string> out;
    for (const auto& c : own) {
        if (total <= budget) break;
        if (std::find(pinned.begin(), pinned.end(), c.file->key) != pinned.end()) continue;
        total -= c.file->bytes;
        out.push_back(c.file->key);
    }
    return out;
}

}  // namespace warmslot::cache
