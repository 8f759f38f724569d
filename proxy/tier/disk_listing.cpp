// The disk tier's files for the dashboard: read from every open index on the index thread
// (SQLite blocks), never on an I/O worker.
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

awaitable<std::vector<disk_listing>> disk_tier::listing() {
    std::vector<std::pair<std::string, cache::index*>> open;
    {
        std::lock_guard lock(mu_);
        for (const auto& [dir, idx] : indexes_) open.emplace_back(dir, idx.get());
    }
    // Indexes are never closed while warmslot runs (indexes_ only grows): the pointers stay valid.
    co_return co_await on_index(index_ex_, [open = std::move(open)] {
        std::vector<disk_listing> out;
        for (const auto& [dir, idx] : open) {
            disk_listing l{dir, {}};
            try {
                l.files = idx->all();
            } catch (const std::exception& e) {
                log()->warn("disk tier: listing {}: {}", dir, e.what());
            }
            out.push_back(std::move(l));
        }
        return out;
    });
}

}  // namespace warmslot::tier
