#include "util/escape.hpp"

#include <cstdint>

namespace warmslot::util {
namespace {

// Length of the valid UTF-8 sequence at `i` (1 for ASCII), or 0 when the bytes are not one.
std::size_t sequence_at(std::string_view s, std::size_t i) noexcept {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) return 1;
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2;
        cp = b & 0x1Fu;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        cp = b & 0x0Fu;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        cp = b & 0x07u;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (std::size_t k = 1; k < n; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        if ((c & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (c & 0x3Fu);
    }
    const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

bool control_ascii(unsigned char b) noexcept { return b < 0x20 || b == 0x7F; }

// A two-byte sequence for U+0080..U+009F.
bool c1_at(std::string_view s, std::size_t i) noexcept {
    return static_cast<unsigned char>(s[i]) == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

constexpr char hex[] = "0123456789abcdef";

}  // namespace

bool has_controls(std::string_view text) noexcept {
    for (std::size_t i = 0; i < text.size();) {
        const auto b = static_cast<unsigned char>(text[i]);
        if (b < 0x80) {
            if (control_ascii(b)) return true;
            ++i;
            continue;
        }
        const auto n = sequence_at(text, i);
        if (n == 0 || (n == 2 && c1_at(text, i))) return true;
        i += n;
    }
    return false;
}

std::string escape_controls(std::string_view text) {
    if (!has_controls(text)) return std::string(text);
    std::string out;
    out.reserve(text.size() + 16);
    for (std::size_t i = 0; i < text.size();) {
        const auto b = static_cast<unsigned char>(text[i]);
        const auto n = b < 0x80 ? 1 : sequence_at(text, i);
        if (n == 1 && !control_ascii(b)) {
            out += static_cast<char>(b);
        } else if (n == 2 && c1_at(text, i)) {
            const auto c = static_cast<unsigned char>(text[i + 1]);
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 0xF];
        } else if (n <= 1) {  // C0, DEL or a byte outside valid UTF-8
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 0xF];
            i += 1;
            continue;
        } else {
            out.append(text.substr(i, n));
        }
        i += n;
    }
    return out;
}

}  // namespace warmslot::util
