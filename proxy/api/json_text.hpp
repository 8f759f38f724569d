// Byte-level helpers for the JSON scanners of api/ (json_parse.cpp, timings.cpp). Internal.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace warmslot::api::json_text {

// Bytes a string holds as they are: ASCII from 0x20 on, except '"' and '\\'.
inline constexpr auto plain_bytes = [] {
    std::array<bool, 256> plain{};
    for (std::size_t c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
    return plain;
}();

// The first byte from `p` on that is not plain, eight bytes per step while it can. Each mask
// marks the bytes of one kind (control, non-ASCII, quote, backslash); borrows can only mark
// bytes after a real match, so the lowest mark is the first byte that is not plain.
inline const char* skip_plain(const char* p, const char* end) {
    constexpr std::uint64_t ones = 0x0101010101010101;
    constexpr std::uint64_t highs = 0x8080808080808080;
    const auto has_zero = [](std::uint64_t v) { return (v - ones) & ~v & highs; };
    if constexpr (std::endian::native == std::endian::little) {
        while (end - p >= 8) {
            std::uint64_t x = 0;
            std::memcpy(&x, p, sizeof x);
            const std::uint64_t special = ((x - ones * 0x20) & ~x & highs) | (x & highs) |
                                          has_zero(x ^ (ones * '"')) | has_zero(x ^ (ones * '\\'));
            if (special != 0) return p + std::countr_zero(special) / 8;
            p += 8;
        }
    }
    while (p != end && plain_bytes[static_cast<unsigned char>(*p)]) ++p;
    return p;
}

// Length of the well-formed UTF-8 sequence at `p` (RFC 3629, as nlohmann checks it), or 0.
inline std::size_t utf8_length(const unsigned char* p, const unsigned char* end) {
    const auto in = [&](std::size_t i, unsigned lo, unsigned hi) {
        return p + i < end && p[i] >= lo && p[i] <= hi;
    };
    const unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
    if (c == 0xE0) return in(1, 0xA0, 0xBF) && in(2, 0x80, 0xBF) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
        return in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) ? 3 : 0;
    }
    if (c == 0xED) return in(1, 0x80, 0x9F) && in(2, 0x80, 0xBF) ? 3 : 0;
    if (c == 0xF0) return in(1, 0x90, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) {
        return in(1, 0x80, 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    }
    if (c == 0xF4) return in(1, 0x80, 0x8F) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
    return 0;
}

}  // namespace warmslot::api::json_text
