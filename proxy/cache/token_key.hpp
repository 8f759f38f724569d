// Keys of token prefixes: what a slot file holds, named by the tokens llama-server computed.
// Pure.
//
// A prompt's tokens are cut into blocks of `token_block` tokens and hashed into a chain (XXH3,
// each block seeded with the hash of everything before it, the chain seeded with the backend
// identity), as vLLM's and SGLang's prefix caches do. Two prompts of one identity share their
// first k chain entries exactly when they share their first k blocks of tokens. The key of the
// prefix of n tokens is the hash of the last full block's chain entry, the n mod token_block
// tokens after it and n itself: a file found under the key of a request's first n tokens holds
// exactly those tokens, whatever messages or API shape produced them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace warmslot::cache {

inline constexpr std::size_t token_block = 64;

// Hashed into every chain's seed: a change to how keys are made bumps it, so that files named
// by an earlier form are never taken for a prefix they do not hold.
inline constexpr std::uint32_t token_key_version = 1;

class token_chain {
  public:
    token_chain() = default;
    token_chain(std::string_view identity, std::vector<int> tokens);

    std::size_t size() const noexcept { return tokens_.size(); }
    const std::vector<int>& tokens() const noexcept { return tokens_; }
    // blocks()[i] covers the seed and blocks 0..i; size() / token_block entries.
    const std::vector<std::uint64_t>& blocks() const noexcept { return blocks_; }

    // The key of the first `n` tokens (n <= size(); 16 lower-case hex digits).
    std::string key_at(std::size_t n) const;

  private:
    std::uint64_t seed_ = 0;
    std::vector<int> tokens_;
    std::vector<std::uint64_t> blocks_;
};

// What a chain is seeded with: the backend identity, and under tenant isolation
// (cache.isolation: tenant) the tenant (non-null) too, so that one tenant's keys never name
// another's files, in a slot directory, a replica's or the shared tier.
std::string key_scope(std::string_view identity, const std::string* tenant);

// How many leading blocks two chains of the same identity share.
std::size_t common_blocks(std::span<const std::uint64_t> a,
                          std::span<const std::uint64_t> b) noexcept;

}  // namespace warmslot::cache
