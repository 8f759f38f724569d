// A prefix that another backend saved into its own slot directory: replicas of one model with
// the same KV settings share an identity, so the same key names the same content there. On a
// miss in the backend's own index, the file is hard-linked (or, across file systems, copied)
// into the backend's directory, indexed there, and restored like one of its own
// (docs/architecture.md, "Disk tier"). Each directory's index keeps only its own files: the
// source's row and file are only read.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "cache/replica_file.hpp"
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

// Every other slot directory with an open index, named after a backend that uses it (one of
// the same identity as `backend` when there is one). The cache or cache.replica_files switched
// off: none.
std::vector<disk_tier::other_index> disk_tier::other_indexes(const config::snapshot& cfg,
                                                             int backend) const {
    std::vector<other_index> out;
    if (!cfg->cache.enabled || !cfg->cache.replica_files || backend < 0 ||
        static_cast<std::size_t>(backend) >= cfg->backends.size()) {
        return out;
    }
    const auto own = reg_.info(backend);
    std::vector<bool> same(cfg->backends.size(), false);  // read before mu_ is taken
    for (std::size_t i = 0; i < same.size(); ++i) {
        const auto info = reg_.info(static_cast<int>(i));
        same[i] = own && info && info->identity == own->identity;
    }
    const auto& own_dir = cfg->backends[static_cast<std::size_t>(backend)].slot_save_path;
    std::map<std::string, std::size_t> by_dir;  // directory -> its entry in `out`
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < cfg->backends.size(); ++i) {
        const auto& b = cfg->backends[i];
        if (b.retired || b.slot_save_path.empty() || b.slot_save_path == own_dir) continue;
        const auto it = indexes_.find(b.slot_save_path);
        if (it == indexes_.end()) continue;
        const auto [at, added] = by_dir.emplace(b.slot_save_path, out.size());
        if (added) {
            out.push_back({b.name, it->second.get(), same[i]});
        } else if (same[i] && !out[at->second].same_identity) {
            out[at->second] = {b.name, it->second.get(), true};
        }
    }
    return out;
}

awaitable<std::optional<disk_tier::found_file>> disk_tier::find_file(const config::snapshot& cfg,
                                                                     int backend, const prefix& p,
                                                                     bool allowed) {
    auto* idx = p.index;
    auto own = co_await on_index(index_ex_, [idx, key = p.key] { return idx->find(key); });
    if (own) co_return found_file{std::move(*own), "", ""};
    if (!allowed) co_return std::nullopt;
    if (auto replica = co_await from_replica(cfg, backend, p)) co_return replica;
    co_return co_await from_shared(cfg, backend, p);
}

// The caller holds a lease on p.key: no budget in any directory deletes the source file (nor
// the new one) while it is brought and restored.
awaitable<std::optional<disk_tier::found_file>> disk_tier::from_replica(const config::snapshot& cfg,
                                                                        int backend,
                                                                        const prefix& p) {
    const auto others = other_indexes(cfg, backend);
    const auto info = reg_.info(backend);
    if (others.empty() || !info) co_return std::nullopt;
    const auto offers = co_await on_index(index_ex_, [others, key = p.key] {
        std::vector<cache::replica_offer> out;
        for (const auto& o : others) {
            if (auto row = o.index->find(key))
                out.push_back({o.backend, o.index->slot_dir(), *row});
        }
        return out;
    });
    const auto pick = cache::pick_replica_file(offers, info->identity, room_for(*cfg, p));
    if (!pick) co_return std::nullopt;
    const auto& offer = offers[*pick];
    cache::bring_request req;
    req.source = offer.dir / offer.row.file;
    req.bytes = offer.row.bytes;
    req.target = p.index->slot_dir() / offer.row.file;
    req.deadline = std::chrono::steady_clock::now() + cfg->cache.slot_call_timeout;
    const auto result = co_await on_index(file_ex_, [req] { return cache::bring_slot_file(req); });
    replica_results_[static_cast<std::size_t>(result)].fetch_add(1, std::memory_order_relaxed);
    const auto& name = cfg->backends[static_cast<std::size_t>(backend)].name;
    if (result != cache::bring_result::linked && result != cache::bring_result::copied) {
        log()->info("{}'s file of prefix {} in {} not brought to {}: {}", offer.backend, p.key,
                    offer.dir.string(), name, cache::name(result));
        co_return std::nullopt;
    }
    cache::snapshot row = offer.row;
    co_await index_brought(*cfg, p, row);
    log()->info("prefix {} ({} tokens) {} from {}'s directory into {}'s", p.key, row.tokens,
                cache::name(result), offer.backend, name);
    co_return found_file{row, offer.backend, cache::name(result)};
}

// The largest file the prefix's directory may take for the request's tenant: cache.max_disk,
// or the tenant's budget when it is smaller.
std::uint64_t disk_tier::room_for(const config::config& cfg, const prefix& p) {
    const auto& c = cfg.cache;
    return std::min(c.max_disk, c.max_disk_of(p.tenant).value_or(c.max_disk));
}

// A file brought into p's directory (from a replica's or the shared tier) is indexed there like
// a save: charged to the request that brought it, unused so far, and the budgets applied.
awaitable<void> disk_tier::index_brought(const config::config& cfg, const prefix& p,
                                         cache::snapshot& row) {
    const auto& c = cfg.cache;
    row.tenant = p.tenant;
    row.hits = 0;
    row.created = row.last_used = unix_now();
    co_await on_index(index_ex_, [this, idx = p.index, row, max_disk = c.max_disk,
                                  own_budget = c.max_disk_of(p.tenant)] {
        idx->put(row);
        if (own_budget) idx->enforce_tenant_budget(row.tenant, *own_budget, leases_.held());
        idx->enforce_budget(max_disk, leases_.held());
        return true;
    });
}

}  // namespace warmslot::tier
