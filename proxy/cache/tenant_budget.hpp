// Per-tenant disk budgets, as pure functions: which of a tenant's slot files go when its files
// take more than its budget. No I/O; the index reads the rows and deletes what this chooses.
// Tested as tables.
//
// A file is charged to the tenant whose request wrote it (cache::snapshot::tenant). A tenant's
// budget evicts only that tenant's files, by the value order of the global budget (prefill
// seconds saved per byte, then least recently used, then key); another tenant restoring the
// file raises its value but does not change whom it is charged to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace warmslot::cache {

// What the budget needs to know of one file in the index.
struct stored_file {
    std::string key;
    std::string tenant;  // "" the default tenant
    std::uint64_t bytes = 0;
    std::uint64_t hits = 0;
    double prefill_seconds = 0;
    std::int64_t last_used = 0;  // unix seconds
};

// The keys to delete, in order, so that the files of `tenant` in `files` total at most
// `budget`: that tenant's files only, worth least first; never a key in `pinned` (a file
// being saved or restored). Fewer than needed when pinned files alone exceed the budget.
std::vector<std::string> tenant_evictions(const std::vector<stored_file>& files,
                                          std::string_view tenant, std::uint64_t budget,
                                          const std::vector<std::string>& pinned);

}  // namespace warmslot::cache
