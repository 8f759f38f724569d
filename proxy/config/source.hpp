// The config snapshot warmslot runs under, swapped as a whole when the file is reloaded.
//
// Readers take a shared_ptr to the current snapshot and keep it for as long as they use it (a
// request keeps the one it started with until it ends), so a reload never changes a snapshot
// under anyone's feet and an old one is freed when its last request ends and every thread
// that read it has read again. Thread-safe.
//
// Requests read it several times each, on every worker: each thread keeps its own reference
// (its own reference count), refreshed when the version changes, so that readers on different
// threads neither take a shared lock nor write a shared counter. Not on Windows (see current()).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "config/config.hpp"

namespace warmslot::config {

using snapshot = std::shared_ptr<const config>;

class source {
  public:
    explicit source(config initial)
        : current_(std::make_shared<const config>(std::move(initial))) {}

    snapshot current() const {
#ifdef _WIN32
        // No per-thread reference on Windows: with the thread_local below, a service under wine
        // did not finish stopping (its thread pool's destructor never returned).
        std::lock_guard lock(mu_);
        return current_;
#else
        thread_local cached mine;
        if (mine.source_id != id_ || mine.version != version_.load(std::memory_order_acquire)) {
            std::lock_guard lock(mu_);
            // A count of its own for this thread; the snapshot it aliases stays alive with it.
            auto own = std::make_shared<snapshot>(current_);
            mine.view = snapshot(own, own->get());
            mine.source_id = id_;
            mine.version = version_.load(std::memory_order_relaxed);
        }
        return mine.view;
#endif
    }
    void publish(snapshot next) {
        std::lock_guard lock(mu_);
        current_ = std::move(next);
        version_.fetch_add(1, std::memory_order_release);
    }

  private:
    struct cached {
        std::uint64_t source_id = 0;  // 0: none; ids start at 1 and are never reused
        std::uint64_t version = 0;
        snapshot view;
    };
    static std::uint64_t next_id() {
        static std::atomic<std::uint64_t> last{0};
        return last.fetch_add(1, std::memory_order_relaxed) + 1;
    }

    const std::uint64_t id_ = next_id();
    mutable std::mutex mu_;
    snapshot current_;
    std::atomic<std::uint64_t> version_{0};
};

}  // namespace warmslot::config
