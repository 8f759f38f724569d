// The stable prefix of one request, as the disk tier handles it. Internal to tier/.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tier/disk_tier.hpp"
#include "util/log.hpp"

namespace warmslot::tier {

namespace disk_detail {

inline std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("cache");
    return logger;
}

inline std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Runs blocking index work on the index thread and resumes on the caller's worker.
template <typename F>
auto on_index(net::any_io_executor ex, F f) -> awaitable<decltype(f())> {
    co_return co_await net::co_spawn(
        ex, [f = std::move(f)]() -> awaitable<decltype(f())> { co_return f(); },
        net::use_awaitable);
}

// The shared tier's counters and the calls to it that are still running: kept apart from the
// disk tier, so that a call that hangs on the shared file system can outlive it.
struct shared_state {
    std::string tag;                 // shared_tag(): this process among the warmslots writing there
    std::atomic<int> overran{0};     // calls a request stopped waiting for, not returned yet
    std::atomic<int> publishing{0};  // publishes queued or running
    std::mutex mu;
    std::map<std::string, std::uint64_t> counts;  // "op/result" -> how many
    std::uint64_t evicted = 0;
    bool swept = false;
    std::chrono::steady_clock::time_point last_sweep;
    static constexpr std::chrono::seconds sweep_every{30};
    void count(std::string_view op, std::string_view result);
    bool sweep_due();  // true at most once every sweep_every
};
std::string shared_tag();

}  // namespace disk_detail

struct disk_tier::prefix {
    std::string key;       // the key of its tokens (cache/token_key.hpp)
    std::vector<int> ids;  // its tokens, as the request's prompt begins
    // On a model that rolls back only to context checkpoints: where the request's last user
    // message starts, when that lies inside the prefix (0: not). The priming stops there first,
    // so the slot gets the checkpoint llama-server makes there for the request itself.
    std::size_t checkpoint_at = 0;
    // The message levels it covers when it ends where the request's final user turn starts
    // (the stable messages); empty for a prefix that ends at a learned split point.
    std::vector<routing::prefix_level> levels;
    nlohmann::json messages;               // the stable messages (empty for a learned one)
    const nlohmann::json* body = nullptr;  // the whole request (lives during prepare)
    // The index of the slot directory, taken once when the work on the prefix begins: a reload
    // that switches the cache off meanwhile stops the next requests' work, not this one's
    // (indexes are never closed while warmslot runs, so the pointer stays valid).
    cache::index* index = nullptr;
    std::string tenant;  // whose request: its file is charged to them
};

}  // namespace warmslot::tier
