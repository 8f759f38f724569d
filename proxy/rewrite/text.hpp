// Text helpers for the rewrite rules: hashing, UTF-8 safe cuts, lines and content-defined
// chunks. Pure, no state, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace warmslot::rewrite {

std::uint64_t hash_text(std::string_view text) noexcept;
std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) noexcept;

// The largest position <= pos that does not fall inside a UTF-8 sequence.
std::size_t utf8_floor(std::string_view text, std::size_t pos) noexcept;

// At most `max_bytes` of the first line of `text`, cut on a character boundary; "..." marks a cut.
std::string excerpt(std::string_view text, std::size_t max_bytes);

// Lines with their '\n' (the last one may have none). Joining them gives the text back.
std::vector<std::string_view> split_lines(std::string_view text);

// A content-defined chunk: where it ends depends only on the bytes around it, so an edit
// changes the chunks near it and no others. Boundaries never fall inside a UTF-8 sequence.
struct chunk {
    std::uint64_t hash = 0;
    std::uint32_t bytes = 0;
};

inline constexpr std::size_t chunk_min_bytes = 32;
inline constexpr std::size_t chunk_max_bytes = 1024;

std::vector<chunk> content_chunks(std::string_view text);

// Chunk hashes sorted, for similarity lookups.
std::vector<std::uint64_t> sorted_hashes(const std::vector<chunk>& chunks);

// Share (0..1) of the larger text that is made of chunks both texts have: 1 for equal texts,
// about 1 - 2*128/size for one changed line. `old_sorted` comes from sorted_hashes().
double similarity(const std::vector<chunk>& now, std::uint64_t now_bytes,
                  const std::vector<std::uint64_t>& old_sorted, std::uint64_t old_bytes);

}  // namespace warmslot::rewrite
