#include "cache/token_key.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>

namespace warmslot::cache {

namespace {

std::uint64_t hash_tokens(const int* first, std::size_t count, std::uint64_t seed) {
    return XXH3_64bits_withSeed(first, count * sizeof(int), seed);
}

}  // namespace

token_chain::token_chain(std::string_view identity, std::vector<int> tokens)
    : tokens_(std::move(tokens)) {
    const std::string seed_text =
        fmt::format("warmslot token prefix v{}\n{}", token_key_version, identity);
    seed_ = XXH3_64bits(seed_text.data(), seed_text.size());
    const std::size_t full = tokens_.size() / token_block;
    blocks_.reserve(full);
    std::uint64_t h = seed_;
    for (std::size_t i = 0; i < full; ++i) {
        h = hash_tokens(tokens_.data() + i * token_block, token_block, h);
        blocks_.push_back(h);
    }
}

std::string token_chain::key_at(std::size_t n) const {
    n = std::min(n, tokens_.size());
    const std::size_t q = n / token_block;
    const std::uint64_t before = q == 0 ? seed_ : blocks_[q - 1];
    const std::uint64_t tail =
        hash_tokens(tokens_.data() + q * token_block, n - q * token_block, before);
    const std::array<std::uint64_t, 2> last{tail, static_cast<std::uint64_t>(n)};
    return fmt::format("{:016x}", XXH3_64bits(last.data(), sizeof(last)));
}

std::size_t common_blocks(std::span<const std::uint64_t> a,
                          std::span<const std::uint64_t> b) noexcept {
    const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    return static_cast<std::size_t>(ia - a.begin());
}

std::string key_scope(std::string_view identity, const std::string* tenant) {
    std::string out(identity);
    if (tenant != nullptr) {
        // A separator no identity holds (identities are printable text), then the tenant.
        out += '\x1f';
        out += "tenant=";
        out += *tenant;
    }
    return out;
}

}  // namespace warmslot::cache
