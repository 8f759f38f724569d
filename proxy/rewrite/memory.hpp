// What the rewrite rules remember of earlier requests: the documents sent (to recognise a
// revision and send the original again), the order documents were sent in after a given prefix,
// and the notes added to a user turn (so that turn reads the same when it is history).
//
// One memory serves all workers: every method locks, so it is thread-safe. Bounded: past
// `max_bytes` the entries used least recently are dropped. The rewrite itself only reads
// (lookups touch entries); the pipeline calls remember() after a request succeeded.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rewrite/text.hpp"

namespace warmslot::rewrite {

struct stored_document {
    std::string text;
    std::uint64_t hash = 0;
    std::string id;  // from the edit_id pattern; "" when none
    std::vector<chunk> chunks;
    std::vector<std::uint64_t> sorted;  // chunk hashes, sorted
};

// What one request taught: applied with memory::remember.
struct memory_update {
    struct document {
        std::string text;
        std::string id;
    };
    std::vector<document> documents;
    std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> orders;  // prefix -> hashes
    std::vector<std::pair<std::uint64_t, std::string>> notes;  // user turn key -> note
    bool empty() const { return documents.empty() && orders.empty() && notes.empty(); }
};

class memory {
  public:
    explicit memory(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}

    bool knows(std::uint64_t document_hash) const;
    std::shared_ptr<const stored_document> by_id(const std::string& id) const;
    // The remembered document most similar to `chunks`, if at least `threshold` similar.
    std::shared_ptr<const stored_document> most_similar(const std::vector<chunk>& chunks,
                                                        std::uint64_t bytes,
                                                        double threshold) const;
    std::optional<std::vector<std::uint64_t>> order(std::uint64_t prefix_key) const;
    std::optional<std::string> note(std::uint64_t turn_key) const;

    void remember(const memory_update& u);
    std::uint64_t bytes() const;
    std::size_t documents() const;

  private:
    struct doc_entry {
        std::shared_ptr<const stored_document> doc;
        std::uint64_t used = 0;
    };
    template <class T>
    struct entry {
        T value;
        std::uint64_t used = 0;
    };
    void evict_locked();
    std::uint64_t tick_locked() const { return ++clock_; }

    mutable std::mutex mu_;
    std::uint64_t max_bytes_;
    std::uint64_t bytes_ = 0;
    mutable std::uint64_t clock_ = 0;
    mutable std::unordered_map<std::uint64_t, doc_entry> docs_;
    mutable std::unordered_map<std::uint64_t, entry<std::vector<std::uint64_t>>> orders_;
    mutable std::unordered_map<std::uint64_t, entry<std::string>> notes_;
};

}  // namespace warmslot::rewrite
