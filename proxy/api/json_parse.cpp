#include "api/json_parse.hpp"

#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "api/json_text.hpp"

namespace warmslot::api {
namespace {

using json_text::skip_plain;
using json_text::utf8_length;

using nlohmann::json;

// Deeper documents are refused (parse_json's contract).
constexpr int max_depth = max_json_depth;

// Hexadecimal digits' values; -1 for every other byte.
constexpr auto hex_values = [] {
    std::array<std::int8_t, 256> values{};
    values.fill(-1);
    for (int c = 0; c < 10; ++c)
        values[static_cast<std::size_t>('0') + static_cast<std::size_t>(c)] =
            static_cast<std::int8_t>(c);
    for (int c = 0; c < 6; ++c) {
        values[static_cast<std::size_t>('a') + static_cast<std::size_t>(c)] =
            static_cast<std::int8_t>(10 + c);
        values[static_cast<std::size_t>('A') + static_cast<std::size_t>(c)] =
            static_cast<std::int8_t>(10 + c);
    }
    return values;
}();

void append_utf8(std::string& out, std::uint32_t cp) {
    char bytes[4];
    std::size_t n = 0;
    const auto byte = [&](std::uint32_t b) { bytes[n++] = static_cast<char>(b); };
    if (cp < 0x80) {
        byte(cp);
    } else if (cp < 0x800) {
        byte(0xC0 | (cp >> 6));
        byte(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        byte(0xE0 | (cp >> 12));
        byte(0x80 | ((cp >> 6) & 0x3F));
        byte(0x80 | (cp & 0x3F));
    } else {
        byte(0xF0 | (cp >> 18));
        byte(0x80 | ((cp >> 12) & 0x3F));
        byte(0x80 | ((cp >> 6) & 0x3F));
        byte(0x80 | (cp & 0x3F));
    }
    out.append(bytes, n);
}

// Recursive descent over the strict subset described in the header. Every method returns
// false both on invalid JSON and on valid JSON it leaves to nlohmann; the caller cannot and
// need not tell the two apart.
class fast_parser {
  public:
    explicit fast_parser(std::string_view text)
        : p_(text.data()), end_(text.data() + text.size()) {}

    bool document(json& out) {
        skip_whitespace();
        if (!value(out, 0)) return false;
        skip_whitespace();
        return p_ == end_;
    }

  private:
    void skip_whitespace() {
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }
    bool at(char c) const { return p_ != end_ && *p_ == c; }
    bool literal(std::string_view word) {
        if (static_cast<std::size_t>(end_ - p_) < word.size() ||
            std::memcmp(p_, word.data(), word.size()) != 0) {
            return false;
        }
        p_ += word.size();
        return true;
    }

    bool value(json& out, int depth);
    bool object(json& out, int depth);
    bool array(json& out, int depth);
    bool string(std::string& out);
    bool skip_utf8();
    bool escape(std::string& out);
    bool hex4(std::uint32_t& cp);
    bool unicode_escape(std::string& out);
    bool number(json& out);

    const char* p_;
    const char* end_;
};

bool fast_parser::value(json& out, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
        case '{': return object(out, depth + 1);
        case '[': return array(out, depth + 1);
        case '"': out = json::value_t::string; return string(*out.get_ptr<json::string_t*>());
        case 't': out = true; return literal("true");
        case 'f': out = false; return literal("false");
        case 'n': out = nullptr; return literal("null");
        default: return number(out);
    }
}

// Members go straight into the object's map: a key seen before keeps its node and takes the
// later value, as nlohmann's DOM parser does.
bool fast_parser::object(json& out, int depth) {
    if (depth > max_depth) return false;
    ++p_;
    out = json::value_t::object;
    auto& members = *out.get_ptr<json::object_t*>();
    skip_whitespace();
    if (at('}')) {
        ++p_;
        return true;
    }
    std::string key;
    while (true) {
        if (!at('"') || !string(key)) return false;
        skip_whitespace();
        if (!at(':')) return false;
        ++p_;
        skip_whitespace();
        auto member = members.try_emplace(members.end(), std::move(key));
        if (!value(member->second, depth)) return false;
        skip_whitespace();
        if (at(',')) {
            ++p_;
            skip_whitespace();
        } else if (at('}')) {
            ++p_;
            return true;
        } else {
            return false;
        }
    }
}

bool fast_parser::array(json& out, int depth) {
    if (depth > max_depth) return false;
    ++p_;
    out = json::value_t::array;
    auto& items = *out.get_ptr<json::array_t*>();
    skip_whitespace();
    if (at(']')) {
        ++p_;
        return true;
    }
    items.reserve(4);  // skips the reallocations to 2 and 4 items, as in a short chat
    while (true) {
        if (!value(items.emplace_back(), depth)) return false;
        skip_whitespace();
        if (at(',')) {
            ++p_;
            skip_whitespace();
        } else if (at(']')) {
            ++p_;
            return true;
        } else {
            return false;
        }
    }
}

// The bytes from `p`, inside a string, to its closing quote (or to the end of the text): at
// most what they decode to. Each quote is checked by the backslashes right before it, so the
// scan is linear.
std::size_t rest_of_string(const char* p, const char* end) {
    for (const char* q = p; q != end; ++q) {
        q = static_cast<const char*>(std::memchr(q, '"', static_cast<std::size_t>(end - q)));
        if (q == nullptr) break;
        const char* b = q;
        while (b != p && b[-1] == '\\') --b;
        if ((q - b) % 2 == 0) return static_cast<std::size_t>(q - p);
    }
    return static_cast<std::size_t>(end - p);
}

// A string at p_ (on its opening quote), decoded into `out`. Runs of plain bytes are copied
// in one append each. A string with escapes is sized once at its first: grown by appends, a
// long one would be copied at each doubling, and hold the old copy and the new at once.
bool fast_parser::string(std::string& out) {
    out.clear();
    const char* run = ++p_;
    while (true) {
        p_ = skip_plain(p_, end_);
        if (p_ == end_) return false;
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"' || c == '\\') {
            if (c == '\\' && out.empty()) {
                out.reserve(static_cast<std::size_t>(p_ - run) + rest_of_string(p_, end_));
            }
            out.append(run, static_cast<std::size_t>(p_ - run));
            ++p_;
            if (c == '"') return true;
            if (!escape(out)) return false;
            run = p_;
        } else if (c < 0x80) {
            return false;  // a control character
        } else if (!skip_utf8()) {
            return false;
        }
    }
}

// A run of multi-byte UTF-8 sequences at p_, two-byte ones (most non-Latin letters) checked
// inline; false if one is malformed.
bool fast_parser::skip_utf8() {
    const auto* p = reinterpret_cast<const unsigned char*>(p_);
    const auto* end = reinterpret_cast<const unsigned char*>(end_);
    while (p != end && *p >= 0x80) {
        if (*p >= 0xC2 && *p <= 0xDF && end - p >= 2 && (p[1] & 0xC0) == 0x80) {
            p += 2;
            continue;
        }
        const auto n = utf8_length(p, end);
        if (n == 0) return false;
        p += n;
    }
    p_ = reinterpret_cast<const char*>(p);
    return true;
}

// The escape after a backslash at p_.
bool fast_parser::escape(std::string& out) {
    if (p_ == end_) return false;
    switch (*p_++) {
        case '"': out.push_back('"'); return true;
        case '\\': out.push_back('\\'); return true;
        case '/': out.push_back('/'); return true;
        case 'b': out.push_back('\b'); return true;
        case 'f': out.push_back('\f'); return true;
        case 'n': out.push_back('\n'); return true;
        case 'r': out.push_back('\r'); return true;
        case 't': out.push_back('\t'); return true;
        case 'u': return unicode_escape(out);
        default: return false;
    }
}

bool fast_parser::hex4(std::uint32_t& cp) {
    if (end_ - p_ < 4) return false;
    cp = 0;
    for (int i = 0; i < 4; ++i) {
        // -1 marks a byte that is no hex digit: the table's values are signed on purpose.
        const int v =
            hex_values[static_cast<unsigned char>(*p_++)];  // NOLINT(bugprone-signed-char-misuse)
        if (v < 0) return false;
        cp = cp * 16 + static_cast<std::uint32_t>(v);
    }
    return true;
}

// \uXXXX after "\u": a high surrogate must be followed by an escaped low one; a lone low
// surrogate is an error. The code point is stored as UTF-8.
bool fast_parser::unicode_escape(std::string& out) {
    std::uint32_t cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        std::uint32_t low = 0;
        if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
        p_ += 2;
        if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return false;
    }
    append_utf8(out, cp);
    return true;
}

// A number in JSON's grammar, typed as nlohmann types it: integers without a minus are
// unsigned, with one signed, anything with a fraction or an exponent a double. Integers of
// more than 18 digits (which may overflow) and doubles from_chars reports out of range
// (overflow, which nlohmann rejects, and underflow) are left to nlohmann.
bool fast_parser::number(json& out) {
    const char* start = p_;
    const auto digits = [&] {
        const char* from = p_;
        while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
        return static_cast<std::size_t>(p_ - from);
    };
    const bool negative = at('-');
    if (negative) ++p_;
    const char* int_start = p_;
    std::uint64_t magnitude = 0;  // wraps past 19 digits; integers that long go to nlohmann
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        magnitude = magnitude * 10 + static_cast<std::uint64_t>(*p_++ - '0');
    }
    const auto int_digits = static_cast<std::size_t>(p_ - int_start);
    if (int_digits == 0 || (int_digits > 1 && *int_start == '0')) return false;
    bool integer = true;
    if (at('.')) {
        ++p_;
        if (digits() == 0) return false;
        integer = false;
    }
    if (at('e') || at('E')) {
        ++p_;
        if (at('+') || at('-')) ++p_;
        if (digits() == 0) return false;
        integer = false;
    }
    if (integer) {
        if (int_digits > 18) return false;
        if (negative) {
            out = -static_cast<std::int64_t>(magnitude);
        } else {
            out = magnitude;
        }
        return true;
    }
    double d = 0;
    const auto [ptr, ec] = std::from_chars(start, p_, d);
    if (ec != std::errc{} || ptr != p_) return false;
    out = d;
    return true;
}

}  // namespace

// Whether `text` opens more than `limit` arrays and objects inside each other, brackets in
// strings not counted. Linear, no recursion: it runs before anything that would recurse.
bool nests_deeper_than(std::string_view text, int limit) {
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return true;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return false;
}

json parse_json(std::string_view text) {
    json out;
    if (fast_parser(text).document(out)) return out;
    // nlohmann parses any depth, but copying, dumping and fingerprinting such a value recurse:
    // a few megabytes of brackets would overflow a worker's stack.
    if (nests_deeper_than(text, max_depth)) return json(json::value_t::discarded);
    return json::parse(text, nullptr, false);
}

}  // namespace warmslot::api
