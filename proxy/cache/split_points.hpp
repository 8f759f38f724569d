// Where prompts part ways, learned from traffic. Pure, not thread-safe (the disk tier guards it).
//
// A split point is a token position (a multiple of cache::token_block) where two prompts of one
// backend identity that share everything before it go on differently, each for at least
// `min_continuation_blocks` more blocks: two sessions of an agent that share their system prompt
// and tool definitions, two conversations on one document. A prompt that merely extends an
// earlier one (the next turn of the same conversation) makes no split point: it passes the
// earlier prompt's end, which no other continuation has passed. A file that ends at a split
// point is a prefix of every later prompt that passes it, on every model kind.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace warmslot::cache {

class split_points {
  public:
    struct limits {
        std::size_t prompts = 64;   // remembered prompts per identity (one per conversation)
        std::size_t points = 1024;  // split points per identity, the least recently passed go
        std::size_t min_continuation_blocks = 2;
    };
    split_points() = default;
    explicit split_points(limits l) : limits_(l) {}

    // A split point made by observe(): `at` blocks, `hash` the chain entry of its last block.
    struct made {
        std::uint64_t hash = 0;
        std::size_t at = 0;
    };

    // Records a prompt (its block chain, cache::token_chain::blocks()) and returns the longest
    // split point it passes, in blocks (0: none), counting one it makes with a remembered prompt
    // now; the points it makes that were not known are appended to `made_now` (when given).
    // The prompt replaces a remembered one it extends.
    std::size_t observe(const std::string& identity, std::span<const std::uint64_t> blocks,
                        std::uint64_t now, std::vector<made>* made_now = nullptr);

    // The longest known split point `blocks` passes, in blocks (0: none). Does not record.
    std::size_t longest_passed(const std::string& identity,
                               std::span<const std::uint64_t> blocks) const;

    // Split points learned elsewhere (a slot file's end): `at` blocks, `hash` the chain entry of
    // its last block.
    void add(const std::string& identity, std::uint64_t hash, std::size_t at, std::uint64_t now);

    std::size_t points(const std::string& identity) const;

  private:
    struct point {
        std::size_t at = 0;  // blocks
        std::uint64_t last_passed = 0;
    };
    struct per_identity {
        std::deque<std::vector<std::uint64_t>> prompts;  // most recent first
        std::map<std::uint64_t, point> points;           // chain entry of the last block -> point
    };
    limits limits_;
    std::map<std::string, per_identity> by_identity_;
    void trim(per_identity& id) const;
};

}  // namespace warmslot::cache
