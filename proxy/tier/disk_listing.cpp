// The disk tier's files for the dashboard and status: read from every open index on the index
// thread (SQLite blocks), never on an I/O worker, and only when an index changed since the last
// read: polls of an unchanged tier cost no index work, and one read at a time runs.
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

awaitable<std::vector<disk_listing>> disk_tier::listing() {
    std::vector<std::pair<std::string, cache::index*>> open;
    {
        std::lock_guard lock(mu_);
        for (const auto& [dir, idx] : indexes_) open.emplace_back(dir, idx.get());
    }
    // Read before the walk: a change during it makes the next call walk again.
    std::vector<std::uint64_t> at;
    at.reserve(open.size());
    for (const auto& o : open) at.push_back(o.second->changes());
    {
        std::lock_guard lock(listing_mu_);
        // Unchanged, or another caller is reading now: the last listing (a read under way is at
        // most what changed since it began).
        if (listed_ && (at == listed_at_ || listing_now_)) co_return *listed_;
        listing_now_ = true;
    }
    struct reading {
        disk_tier* self;
        ~reading() {
            std::lock_guard lock(self->listing_mu_);
            self->listing_now_ = false;
        }
    } const guard{this};
    listing_reads_.fetch_add(1, std::memory_order_relaxed);
    // Indexes are never closed while warmslot runs (indexes_ only grows): the pointers stay valid.
    bool failed = false;
    auto out = co_await on_index(index_ex_, [open = std::move(open), &failed] {
        std::vector<disk_listing> listed;
        for (const auto& [dir, idx] : open) {
            disk_listing l{dir, {}};
            try {
                l.files = idx->all();
            } catch (const std::exception& e) {
                log()->warn("disk tier: listing {}: {}", dir, e.what());
                failed = true;
            }
            listed.push_back(std::move(l));
        }
        return listed;
    });
    {
        std::lock_guard lock(listing_mu_);
        listed_ = out;
        // A read that failed somewhere is not kept as current: the next call reads again.
        listed_at_ = failed ? std::vector<std::uint64_t>{} : std::move(at);
    }
    co_return out;
}

}  // namespace warmslot::tier
