// The disk tier's own state: the indexes of the slot directories, and what it learned of each
// backend (are restores useful there, may it save there). Also describe(disk_action). See
// disk_tier.hpp; disk_prepare.cpp holds a request's prefixes and prepare(), disk_miss.cpp what
// a miss does, disk_restore.cpp the restore of one file.
#include <fmt/format.h>

#include <algorithm>

#include "tier/disk_prefix.hpp"
#include "util/log.hpp"

// The constructor owns the shared tier's (not yet started) pool: its type must be complete.
#include <boost/asio/thread_pool.hpp>

namespace warmslot::tier {
using namespace disk_detail;

std::string describe(const disk_action& a) {
    if (!a.unloaded.empty()) {
        auto plain = a;
        plain.unloaded.clear();
        const auto rest = describe(plain);
        return rest.empty() ? a.unloaded : a.unloaded + "; " + rest;
    }
    if (a.save_due > 0 && !a.after_answer) {
        // Sent in the answer's headers: the save comes after the answer.
        if (a.what == disk_action::kind::restored)
            return fmt::format("restored {} tokens, snapshot {} tokens after the answer", a.tokens,
                               a.save_due);
        if (a.what == disk_action::kind::none)
            return fmt::format("snapshot {} tokens after the answer", a.save_due);
        if (a.what == disk_action::kind::snapshotted)
            return fmt::format("snapshot {} tokens, then {} tokens after the answer", a.tokens,
                               a.save_due);
    }
    switch (a.what) {
        case disk_action::kind::none: return a.choice.empty() ? "" : "slot kept: " + a.choice;
        case disk_action::kind::restored:
            if (a.shared)
                return fmt::format("restored {} tokens (from the shared tier, copied)", a.tokens);
            if (!a.from.empty())
                return fmt::format("restored {} tokens (from replica {}, {})", a.tokens, a.from,
                                   a.brought);
            if (a.extended_to > 0)
                return fmt::format("restored {} tokens, then snapshot {} tokens{}", a.tokens,
                                   a.extended_to, a.after_answer ? " saved after the answer" : "");
            return a.choice.empty() ? fmt::format("restored {} tokens", a.tokens)
                                    : fmt::format("restored {} tokens, cheaper than a rollback: {}",
                                                  a.tokens, a.choice);
        case disk_action::kind::snapshotted:
            if (a.extended_to > 0)  // primed and saved before, the whole prompt after the answer
                return fmt::format("snapshot {} tokens, then {} tokens saved after the answer",
                                   a.tokens, a.extended_to);
            return a.after_answer
                       ? fmt::format("snapshot {} tokens saved after the answer", a.tokens)
                       : fmt::format("snapshot {} tokens", a.tokens);
        case disk_action::kind::restore_failed:
            return a.file_dropped ? "restore failed, file dropped, recomputed"
                                  : "restore failed, file kept, recomputed";
    }
    return "";
}

disk_tier::disk_tier(const config::source& src, routing::registry& reg,
                     net::any_io_executor index_ex, net::any_io_executor file_ex)
    : src_(src),
      reg_(reg),
      index_ex_(std::move(index_ex)),
      file_ex_(std::move(file_ex)),
      shared_(std::make_shared<shared_state>()) {
    shared_->tag = shared_tag();
    std::lock_guard lock(mu_);
    open_indexes(*src_.current());
}

void disk_tier::open_indexes(const config::config& cfg) {
    if (!cfg.cache.enabled) return;
    for (const auto& b : cfg.backends) {
        if (b.retired || b.slot_save_path.empty() || indexes_.count(b.slot_save_path)) continue;
        const std::filesystem::path dir(b.slot_save_path);
        // warmslot makes the directory of a backend it starts; another's is the user's to make.
        if (b.supervised()) std::filesystem::create_directories(dir);
        auto idx = std::make_unique<cache::index>(dir / "warmslot-index.sqlite", dir);
        for (const auto& r : idx->splits()) {
            splits_.add(r.identity, r.hash, static_cast<std::size_t>(r.blocks),
                        static_cast<std::uint64_t>(std::max<std::int64_t>(r.last_passed, 0)));
        }
        indexes_[b.slot_save_path] = std::move(idx);
    }
}

void disk_tier::sync() {
    const auto cfg = src_.current();
    std::lock_guard lock(mu_);
    try {
        open_indexes(*cfg);
    } catch (const std::exception& e) {
        log()->error("disk tier: {}", e.what());
    }
}

// The cache switched off by a reload stops new snapshots and restores; files stay.
cache::index* disk_tier::index_for(int backend) const {
    const auto cfg = src_.current();
    if (!cfg->cache.enabled || backend < 0 ||
        static_cast<std::size_t>(backend) >= cfg->backends.size()) {
        return nullptr;
    }
    const auto& dir = cfg->backends[static_cast<std::size_t>(backend)].slot_save_path;
    if (dir.empty()) return nullptr;  // no slot files: no index (and no lock to take)
    std::lock_guard lock(mu_);
    auto it = indexes_.find(dir);
    return it == indexes_.end() ? nullptr : it->second.get();
}

bool disk_tier::restores_allowed(int backend) {
    const auto info = reg_.info(backend);
    std::lock_guard lock(mu_);
    auto& judge = backends_[backend].judge;
    if (info) judge.observe_identity(info->identity);  // another model or build: judged afresh
    return judge.allowed(cache::policy_clock::now());
}

bool disk_tier::saves_allowed(int backend) const {
    std::lock_guard lock(mu_);
    const auto it = backends_.find(backend);
    return it == backends_.end() || it->second.saves.allowed(cache::policy_clock::now());
}

void disk_tier::saved(int backend, bool ok) {
    std::lock_guard lock(mu_);
    auto& b = backends_[backend].saves;
    if (ok) {
        b.succeeded();
        return;
    }
    b.failed(cache::policy_clock::now());
    log()->warn("backend {}: saving a slot failed; no automatic save there for {} s",
                src_.current()->backends[static_cast<std::size_t>(backend)].name,
                b.pause().count());
}

bool disk_tier::enabled_for(int backend) const {
    return backend >= 0 && index_for(backend) != nullptr;
}

}  // namespace warmslot::tier
