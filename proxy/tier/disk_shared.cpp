// The shared tier on the request path (cache/shared_tier.hpp; docs/scaling.md, "Slot files
// shared between hosts"). After a save, the file is published to cache.shared_dir in the
// background; on a miss in the backend's own directory and its replicas', the prefix is looked
// up there and, when found for this backend's identity, copied into the backend's directory,
// indexed there and restored like its own.
//
// The shared directory may be slow, full or gone (a partition, a hung NFS mount): every call to
// it runs on threads of its own and a request waits for it at most cache.shared_timeout for the
// lookup and the prefix's prefill time for the copy. A call that overran makes the next lookups
// a miss at once until it returns, so a hung mount costs each request nothing.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cctype>
#include <filesystem>
#include <random>

#include "cache/shared_tier.hpp"
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

constexpr int max_publishing = 4;                  // publishes queued or running; more are dropped
constexpr std::chrono::seconds stale_after{3600};  // leftovers, and a lock, older than this

// Runs `f` on `work_ex` and waits for it until `deadline`. std::nullopt when it did not finish
// by then (it goes on on its own thread, counted in `overran` until it returns, its result
// dropped) or when it threw.
template <typename F>
auto within(net::any_io_executor work_ex, F f, std::chrono::steady_clock::time_point deadline,
            std::shared_ptr<disk_detail::shared_state> tier)
    -> awaitable<std::optional<decltype(f())>> {
    using T = decltype(f());
    struct state {
        explicit state(net::any_io_executor ex) : executor(ex), timer(ex) {}
        net::any_io_executor executor;
        net::steady_timer timer;
        std::mutex mu;
        std::optional<T> result;
        bool done = false;
        bool abandoned = false;
    };
    auto s = std::make_shared<state>(co_await net::this_coro::executor);
    s->timer.expires_at(deadline);
    net::post(work_ex, [s, tier, f = std::move(f)]() mutable {
        std::optional<T> r;
        try {
            r = f();
        } catch (const std::exception& e) {  // never out of the pool's thread
            log()->warn("the shared tier: {}", e.what());
        }
        std::lock_guard lock(s->mu);
        if (s->abandoned) {
            tier->overran.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
        s->result = std::move(r);
        s->done = true;
        // The timer is touched only on its own executor.
        net::post(s->executor, [s] { s->timer.cancel(); });
    });
    co_await s->timer.async_wait(nothrow);
    std::lock_guard lock(s->mu);
    if (!s->done) {
        s->abandoned = true;
        tier->overran.fetch_add(1, std::memory_order_relaxed);
    }
    co_return std::move(s->result);
}

// The shared tier's name for a prefix saved for `tenant`: its key when tenants share the tier
// (and for the default tenant, whose entries predate tenants), else a key of the prefix and the
// tenant, so that each tenant finds only its own entries and never blocks another's publish.
std::string shared_key(const std::string& key, const std::string& tenant, bool across) {
    if (across || tenant.empty()) return key;
    const std::string text = key + '\n' + tenant;
    const auto h = XXH3_128bits(text.data(), text.size());
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

}  // namespace

namespace disk_detail {

// "<host>-<random>": names this process in temporaries and manifests of the shared directory,
// apart from every other warmslot writing there.
std::string shared_tag() {
    std::string host;
    try {
        host = net::ip::host_name();
    } catch (const std::exception&) {
        host = "host";
    }
    for (auto& c : host) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') c = '_';
    }
    return fmt::format("{}-{:08x}", host.substr(0, 64), std::random_device{}());
}

void shared_state::count(std::string_view op, std::string_view result) {
    std::lock_guard lock(mu);
    ++counts[fmt::format("{}/{}", op, result)];
}

// A sweep lists the whole shared directory (slow on a network file system with many entries):
// at most one every sweep_every, so a burst of saves lists it once.
bool shared_state::sweep_due() {
    std::lock_guard lock(mu);
    const auto now = std::chrono::steady_clock::now();
    if (swept && now - last_sweep < sweep_every) return false;
    swept = true;
    last_sweep = now;
    return true;
}

}  // namespace disk_detail

disk_tier::~disk_tier() {
    if (!shared_pool_) return;  // the shared tier was never used
    shared_pool_->stop();       // what is queued is dropped; a call under way finishes
    if (shared_->overran.load() > 0) {
        // A call hangs on the shared file system: its thread cannot be joined. The process is
        // ending; the thread holds only the tier's state (shared_), never this object.
        (void)shared_pool_.release();
        return;
    }
    shared_pool_->join();
}

net::any_io_executor disk_tier::shared_executor() {
    std::call_once(shared_started_,
                   [this] { shared_pool_ = std::make_unique<net::thread_pool>(2); });
    return shared_pool_->get_executor();
}

std::map<std::string, std::uint64_t> disk_tier::shared_files_total() const {
    std::lock_guard lock(shared_->mu);
    return shared_->counts;
}

std::uint64_t disk_tier::shared_evictions_total() const {
    std::lock_guard lock(shared_->mu);
    return shared_->evicted;
}

awaitable<std::optional<disk_tier::found_file>> disk_tier::from_shared(const config::snapshot& cfg,
                                                                       int backend,
                                                                       const prefix& p) {
    const auto& c = cfg->cache;
    const auto info = reg_.info(backend);
    if (c.shared_dir.empty() || !info) co_return std::nullopt;
    if (shared_->overran.load(std::memory_order_relaxed) > 0) {
        shared_->count("fetch", "unavailable");  // an earlier call has not returned yet
        co_return std::nullopt;
    }
    const std::filesystem::path root(c.shared_dir);
    const auto looked = co_await within(
        shared_executor(),
        [root, key = shared_key(p.key, p.tenant, c.shared_across_tenants),
         identity = info->identity, tenant = p.tenant, across = c.shared_across_tenants] {
            return cache::find_shared(root, key, identity, across ? nullptr : &tenant);
        },
        std::chrono::steady_clock::now() + c.shared_timeout, shared_);
    if (!looked) {
        shared_->count("fetch", "unavailable");
        log()->warn("the shared tier {} did not answer within {} ms: a miss", c.shared_dir,
                    c.shared_timeout.count());
        co_return std::nullopt;
    }
    if (!*looked) {
        shared_->count("fetch", "missing");
        co_return std::nullopt;
    }
    const auto entry = **looked;
    if (entry.bytes > room_for(*cfg, p)) {
        shared_->count("fetch", "too_big");
        co_return std::nullopt;
    }
    // Worth a copy only while it is quicker than computing the prefix again.
    const auto worth = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(entry.prefill_seconds));
    const auto limit =
        std::clamp<std::chrono::milliseconds>(worth, c.shared_timeout, c.slot_call_timeout);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const auto target = p.index->slot_dir() / cache::file_name_for(p.key);
    const auto copied = co_await within(
        shared_executor(),
        [root, entry, target, deadline, tag = shared_->tag] {
            return cache::fetch_shared(root, entry, target, deadline, unix_now(), tag);
        },
        deadline + std::chrono::seconds(1), shared_);
    const auto result = copied ? *copied : cache::bring_result::too_slow;
    shared_->count("fetch", cache::name(result));
    if (result != cache::bring_result::copied) {
        log()->info("prefix {} in the shared tier not brought to {}'s directory: {}", p.key,
                    cfg->backends[static_cast<std::size_t>(backend)].name, cache::name(result));
        co_return std::nullopt;
    }
    cache::snapshot row;
    row.key = p.key;
    row.identity = entry.identity;
    row.file = cache::file_name_for(p.key);
    row.tokens = entry.tokens;
    row.bytes = entry.bytes;
    row.prefill_seconds = entry.prefill_seconds;
    co_await index_brought(*cfg, p, row);
    log()->info(
        "prefix {} ({} tokens, published by {}) copied from the shared tier into {}'s "
        "directory",
        p.key, row.tokens, entry.publisher, cfg->backends[static_cast<std::size_t>(backend)].name);
    co_return found_file{row, "", "copied", true};
}

// In the background: the request that saved the file does not wait for the shared tier.
void disk_tier::publish(const config::snapshot& cfg, int backend, const cache::snapshot& s,
                        const std::filesystem::path& file) {
    const auto& c = cfg->cache;
    if (c.shared_dir.empty() || s.tokens == 0 || s.bytes == 0) return;
    auto tier = shared_;
    if (tier->overran.load(std::memory_order_relaxed) > 0) {
        tier->count("publish", "unavailable");
        return;
    }
    if (tier->publishing.fetch_add(1, std::memory_order_relaxed) >= max_publishing) {
        tier->publishing.fetch_sub(1, std::memory_order_relaxed);
        tier->count("publish", "busy");
        return;
    }
    cache::shared_entry e;
    e.key = shared_key(s.key, s.tenant, c.shared_across_tenants);
    e.tenant = s.tenant;
    e.identity = s.identity;
    e.tokens = s.tokens;
    e.bytes = s.bytes;
    e.prefill_seconds = s.prefill_seconds;
    e.created = e.last_used = unix_now();
    e.publisher =
        fmt::format("{}/{}", tier->tag, cfg->backends[static_cast<std::size_t>(backend)].name);
    // Holds the tier's state, not the disk tier: a publish that hangs outlives a stop.
    net::post(shared_executor(), [tier, e, file, root = std::filesystem::path(c.shared_dir),
                                  budget = c.shared_max_disk, limit = c.slot_call_timeout] {
        try {
            const auto deadline = std::chrono::steady_clock::now() + limit;
            const auto r = cache::publish_shared(root, e, file, budget, deadline, tier->tag);
            tier->count("publish", cache::name(r));
            if (r == cache::publish_result::published) {
                log()->info("prefix {} ({} tokens) published to the shared tier {}", e.key,
                            e.tokens, root.string());
                if (tier->sweep_due()) {
                    const auto sweep =
                        cache::enforce_shared_budget(root, budget, tier->tag, stale_after);
                    {
                        std::lock_guard lock(tier->mu);
                        tier->evicted += sweep.evicted.size();
                    }
                    if (!sweep.evicted.empty() || sweep.cleaned > 0)
                        log()->info(
                            "shared tier: {} entries evicted (over its budget), {} "
                            "leftovers removed",
                            sweep.evicted.size(), sweep.cleaned);
                }
            } else if (r != cache::publish_result::present) {
                log()->warn("prefix {} not published to the shared tier {}: {}", e.key,
                            root.string(), cache::name(r));
            }
        } catch (const std::exception& x) {  // never out of the pool's thread
            tier->count("publish", "failed");
            log()->warn("publishing prefix {} to the shared tier failed: {}", e.key, x.what());
        }
        tier->publishing.fetch_sub(1, std::memory_order_relaxed);
    });
}

}  // namespace warmslot::tier
