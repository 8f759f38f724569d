#include "rewrite/text.hpp"

#include <algorithm>
#include <array>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace warmslot::rewrite {
namespace {

constexpr std::uint64_t splitmix(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The gear table of the rolling hash: fixed, so chunk boundaries are the same in every run.
constexpr std::array<std::uint64_t, 256> gear = [] {
    std::array<std::uint64_t, 256> table{};
    std::uint64_t state = 0x5741524d534c4f54ull;
    for (auto& v : table) v = splitmix(state);
    return table;
}();

// About one boundary in 128 bytes past the minimum.
constexpr std::uint64_t boundary_mask = 0x7full << 56;

bool continuation(char c) noexcept { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; }

}  // namespace

std::uint64_t hash_text(std::string_view text) noexcept {
    return XXH3_64bits(text.data(), text.size());
}

std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) noexcept {
    const std::array<std::uint64_t, 2> both{a, b};
    return XXH3_64bits(both.data(), sizeof both);
}

std::size_t utf8_floor(std::string_view text, std::size_t pos) noexcept {
    if (pos >= text.size()) return text.size();
    while (pos > 0 && continuation(text[pos])) --pos;
    return pos;
}

std::string excerpt(std::string_view text, std::size_t max_bytes) {
    const auto eol = text.find('\n');
    if (eol != std::string_view::npos) text = text.substr(0, eol);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.size() <= max_bytes) return std::string(text);
    return std::string(text.substr(0, utf8_floor(text, max_bytes))) + "...";
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    while (start < text.size()) {
        const auto eol = text.find('\n', start);
        const auto end = eol == std::string_view::npos ? text.size() : eol + 1;
        out.push_back(text.substr(start, end - start));
        start = end;
    }
    return out;
}

std::vector<chunk> content_chunks(std::string_view text) {
    std::vector<chunk> out;
    std::size_t start = 0;
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        h = (h << 1) + gear[static_cast<unsigned char>(text[i])];
        const std::size_t len = i + 1 - start;
        const bool at_char = i + 1 == text.size() || !continuation(text[i + 1]);
        const bool cut =
            len >= chunk_min_bytes && ((h & boundary_mask) == 0 || len >= chunk_max_bytes);
        if (cut && at_char) {
            out.push_back({hash_text(text.substr(start, len)), static_cast<std::uint32_t>(len)});
            start = i + 1;
            h = 0;
        }
    }
    if (start < text.size()) {
        const auto rest = text.substr(start);
        out.push_back({hash_text(rest), static_cast<std::uint32_t>(rest.size())});
    }
    return out;
}

std::vector<std::uint64_t> sorted_hashes(const std::vector<chunk>& chunks) {
    std::vector<std::uint64_t> out;
    out.reserve(chunks.size());
    for (const auto& c : chunks) out.push_back(c.hash);
    std::sort(out.begin(), out.end());
    return out;
}

double similarity(const std::vector<chunk>& now, std::uint64_t now_bytes,
                  const std::vector<std::uint64_t>& old_sorted, std::uint64_t old_bytes) {
    const std::uint64_t larger = std::max(now_bytes, old_bytes);
    if (larger == 0) return 1.0;
    std::uint64_t shared = 0;
    for (const auto& c : now) {
        if (std::binary_search(old_sorted.begin(), old_sorted.end(), c.hash)) shared += c.bytes;
    }
    return static_cast<double>(std::min(shared, larger)) / static_cast<double>(larger);
}

}  // namespace warmslot::rewrite
