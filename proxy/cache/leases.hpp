// Counted leases on slot-file keys: a key with a lease is being looked up, restored or saved,
// and the disk budget must not delete its file. Thread-safe (one mutex); no I/O.
//
// A lease is taken before the index lookup that decides to restore a file and held until the
// restore has answered, so an eviction running on the index thread in between (another
// request's snapshot making room) can never remove the file under it. Two requests may lease
// the same key at once: the key stays protected until the last lease ends.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace warmslot::cache {

class key_leases {
  public:
    // Ends when destroyed (or moved from and then destroyed). Must not outlive its key_leases.
    class lease {
      public:
        lease() = default;
        lease(lease&& o) noexcept : owner_(o.owner_), key_(std::move(o.key_)) {
            o.owner_ = nullptr;
        }
        lease& operator=(lease&& o) noexcept;
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        ~lease() { release(); }
        void release();
        const std::string& key() const { return key_; }
        bool active() const { return owner_ != nullptr; }

      private:
        friend class key_leases;
        lease(key_leases* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
        key_leases* owner_ = nullptr;
        std::string key_;
    };

    key_leases() = default;
    key_leases(const key_leases&) = delete;
    key_leases& operator=(const key_leases&) = delete;

    lease take(const std::string& key);
    // Only when nobody else holds `key` (one request saves a key at a time: llama-server would
    // write both saves into the same file). std::nullopt: someone does.
    std::optional<lease> take_exclusive(const std::string& key);
    std::size_t count(const std::string& key) const;
    // Every key with a lease now: what enforce_budget must keep.
    std::vector<std::string> held() const;

  private:
    void end(const std::string& key);
    mutable std::mutex mu_;
    std::map<std::string, std::size_t> counts_;
};

}  // namespace warmslot::cache
