// parse_json against nlohmann::json::parse: the same DOM (types, values, doubles bit for bit)
// and the same rejections, over a table of edge cases and a seeded differential fuzz.
#include "api/json_parse.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "json_same.hpp"

using nlohmann::json;
using warmslot::api::parse_json;

namespace {

// True when parse_json agrees with nlohmann on `text`; prints the text when it does not.
bool agrees(std::string_view text) {
    const json expected = json::parse(text, nullptr, false);
    const json got = parse_json(text);
    if (json_same(got, expected)) return true;
    MESSAGE(
        "differs on: ", json(std::string(text)).dump(-1, ' ', true, json::error_handler_t::replace),
        " expected ", expected.dump(-1, ' ', false, json::error_handler_t::replace), " got ",
        got.dump(-1, ' ', false, json::error_handler_t::replace));
    return false;
}

struct parse_case {
    std::string_view text;
    bool valid;
};

using namespace std::string_view_literals;

// clang-format off
const parse_case cases[] = {
    // Documents and whitespace.
    {R"({"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello to user #0000000042."}],"max_tokens":16,"stream":false})", true},
    {"{}", true}, {"[]", true}, {"{ }", true}, {"[ ]", true}, {" \t\r\n{} \t\r\n", true},
    {"[[],{},[[]],{\"a\":{}}]", true}, {"{\"a\" : 1 , \"b\" :[ 1 , 2 ] }", true},
    {"null", true}, {"true", true}, {"false", true}, {"\"top\"", true}, {"7", true},
    {"", false}, {" ", false}, {"\f{}", false}, {"{}\v", false}, {"\xA0{}", false},
    {"{} x", false}, {"{}{}", false}, {"[] []", false}, {"nul", false}, {"truex", false},
    {"True", false}, {"NULL", false}, {"[1,]", false}, {"[,1]", false}, {"{,}", false},
    {"{\"a\":1,}", false}, {"{\"a\"}", false}, {"{\"a\":}", false}, {"{\"a\" 1}", false},
    {"{1:2}", false}, {"{'a':1}", false}, {"[1 2]", false}, {"[", false}, {"{", false},
    {"]", false}, {"}", false}, {"[1", false}, {"{\"a\":1", false}, {"\"abc", false},
    // nlohmann skips a byte order mark and stops reading at a NUL byte.
    {"\xEF\xBB\xBF{}", true}, {"\xEF\xBB{}", false}, {"{}\0"sv, true}, {"[1]\0garbage"sv, true}, {"\0{}"sv, false},
    {"/* c */ {}", false}, {"{} // c", false},
    // Duplicate keys: the last value wins, whatever its type.
    {R"({"a":1,"a":2})", true}, {R"({"a":{"x":1},"b":0,"a":[1]})", true},
    {R"({"b":1,"a":2,"c":3,"a":"last"})", true}, {R"({"":1,"":{}})", true},
    // Numbers.
    {"0", true}, {"-0", true}, {"0.0", true}, {"-0.0", true}, {"1.0", true}, {"1e2", true},
    {"1E2", true}, {"1e+2", true}, {"1e-2", true}, {"-1e-0", true}, {"0e0", true},
    {"123456789012345678", true}, {"-123456789012345678", true},
    {"1234567890123456789", true}, {"9223372036854775807", true}, {"-9223372036854775807", true},
    {"-9223372036854775808", true}, {"-9223372036854775809", true},
    {"18446744073709551615", true}, {"18446744073709551616", true},
    {"123456789012345678901234567890", true}, {"-123456789012345678901234567890", true},
    {"1.7976931348623157e308", true}, {"1.7976931348623159e308", false}, {"1e400", false},
    {"-1e400", false}, {"4.9e-324", true}, {"2.4e-324", true}, {"1e-400", true},
    {"2.2250738585072011e-308", true}, {"2.2250738585072014e-308", true},
    {"0.1", true}, {"0.30000000000000004", true}, {"3.141592653589793238462643383279", true},
    {"9007199254740993", true}, {"9007199254740993.0", true}, {"1.00000000000000011102230246251565", true},
    {"[1,-1,1.5,-1.5,1e10,-0]", true}, {"{\"n\":18446744073709551615}", true},
    {"01", false}, {"-01", false}, {"00", false}, {"1.", false}, {".5", false}, {"-", false},
    {"+1", false}, {"1e", false}, {"1e+", false}, {"1.e5", false}, {"--1", false},
    {"0x10", false}, {"1.5.5", false}, {"NaN", false}, {"Infinity", false}, {"-Infinity", false},
    {"[01]", false}, {"[1.]", false}, {"[-]", false},
    // Strings: escapes.
    {R"("\"\\\/\b\f\n\r\t")", true}, {R"(["a\"b", "\\"])", true}, {R"("\u0041\u00e9\u20AC")", true},
    {R"("\u0000")", true}, {R"("\u001f")", true}, {R"("\uD83D\uDE00")", true}, {R"("\ud83d\ude00x")", true},
    {R"("\uDBFF\uDFFF")", true}, {R"("\uFFFF")", true}, {R"("\uFEFF")", true},
    {R"("\uD83D")", false}, {R"("\uD83Dx")", false}, {R"("\uD83D\u0041")", false},
    {R"("\uDE00")", false}, {R"("\uD83D\uD83D")", false}, {R"("\uD83D\n")", false},
    {R"("\u12")", false}, {R"("\u12G4")", false}, {R"("\x41")", false}, {R"("\a")", false},
    {R"("\U0041")", false}, {R"("\)", false}, {R"("\")", false}, {R"("\'")", false},
    {R"({"k\u00e9y":1,"k\u00e9y":2})", true},
    // Strings: raw bytes and UTF-8.
    {"\"\x7F\"", true}, {"\"\t\"", false}, {"\"\n\"", false}, {"\"\x01\"", false},
    {"\"\x1F\"", false}, {"\"a\0b\""sv, false},
    {"\"\xC3\xA9\"", true}, {"\"\xE2\x82\xAC\"", true}, {"\"\xF0\x9F\x98\x80\"", true},
    {"\"\xF4\x8F\xBF\xBF\"", true}, {"\"\xEF\xBF\xBF\"", true}, {"\"\xED\x9F\xBF\"", true},
    {"\"\xEE\x80\x80\"", true}, {"\"\xF0\x90\x80\x80\"", true}, {"\"\xC2\x80\"", true},
    {"\"\xC0\x80\"", false}, {"\"\xC1\xBF\"", false}, {"\"\xE0\x80\xAF\"", false},
    {"\"\xE0\x9F\xBF\"", false}, {"\"\xF0\x8F\xBF\xBF\"", false}, {"\"\xF4\x90\x80\x80\"", false},
    {"\"\xF5\x80\x80\x80\"", false}, {"\"\xFF\"", false}, {"\"\xFE\"", false},
    {"\"\xED\xA0\x80\"", false}, {"\"\xED\xBF\xBF\"", false}, {"\"\xED\xA0\xBD\xED\xB8\x80\"", false},
    {"\"\x80\"", false}, {"\"\xBF\"", false}, {"\"\xC3\"", false}, {"\"\xC3", false},
    {"\"\xE2\x82\"", false}, {"\"\xF0\x9F\x98\"", false}, {"\"\xC3\x28\"", false},
    {"\"\xE2\x28\xA1\"", false}, {"\"\xF0\x9F\x98\x28\"", false},
    {"{\"\xC3\xA9\":\"\xE2\x82\xAC\"}", true}, {"{\"\xC3\":1}", false}, {"[\"\xF8\x88\x80\x80\x80\"]", false},
};
// clang-format on

std::string nested(int depth, std::string_view open, std::string_view inner,
                   std::string_view close) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += open;
    s += inner;
    for (int i = 0; i < depth; ++i) s += close;
    return s;
}

}  // namespace

TEST_CASE("parse_json matches nlohmann on the edge-case table") {
    for (const auto& c : cases) {
        CAPTURE(json(std::string(c.text)).dump(-1, ' ', true, json::error_handler_t::replace));
        CHECK(agrees(c.text));
        CHECK(parse_json(c.text).is_discarded() == !c.valid);
    }
}

TEST_CASE("parse_json matches nlohmann up to max_json_depth and refuses deeper documents") {
    for (const int depth : {1, 127, 128}) {
        CAPTURE(depth);
        CHECK(agrees(nested(depth, "[", "1", "]")));
        CHECK(agrees(nested(depth, "{\"k\":", "1", "}")));
        CHECK(agrees(nested((depth - 1) / 2, "[{\"a\":", "[]", "}]")));  // 2 levels each, and []
        CHECK(agrees(nested(depth, "[", "", "")));
        CHECK_FALSE(parse_json(nested(depth, "[", "1", "]")).is_discarded());
        // The slow path (an escape nlohmann reads) has the same bound.
        CHECK_FALSE(parse_json(nested(depth, "[", "\"\\u00e9\"", "]")).is_discarded());
    }
    for (const int depth : {129, 130, 1000, 1000000}) {
        CAPTURE(depth);
        CHECK(parse_json(nested(depth, "[", "1", "]")).is_discarded());
        CHECK(parse_json(nested(depth, "{\"k\":", "\"\\u00e9\"", "}")).is_discarded());
        CHECK(parse_json("{\"messages\":[],\"x\":" + nested(depth, "[", "", "]") + "}")
                  .is_discarded());
    }
    // Brackets inside strings do not count, escaped quotes included.
    const std::string text =
        "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
    CHECK(agrees(text));
    CHECK_FALSE(parse_json(text).is_discarded());
}

namespace {

// Random JSON texts: mostly valid, with the escapes, UTF-8, number forms and whitespace a
// client may send, and a few deliberate mistakes; plus byte mutations of any text.
class json_generator {
  public:
    explicit json_generator(std::uint64_t seed) : rng_(seed) {}

    std::string document() {
        std::string out;
        space(out);
        value(out, 0);
        space(out);
        return out;
    }

    std::string mutate(std::string text) {
        static constexpr std::string_view bytes =
            "{}[]:,\"\\ 0123456789.eE+-untrfals\x01\x1F\x7F\x80\xBF\xC3\xED\xF0\xFF";
        const std::size_t edits = 1 + pick(3);
        for (std::size_t i = 0; i < edits; ++i) {
            const std::size_t at = pick(text.size() + 1);
            const char b = pick(4) == 0 ? static_cast<char>(pick(256)) : bytes[pick(bytes.size())];
            const std::size_t op = at == text.size() ? 0 : pick(3);
            if (op == 0) text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), b);
            if (op == 1) text.erase(at, 1);
            if (op == 2) text[at] = b;
        }
        return text;
    }

  private:
    std::size_t pick(std::size_t n) {
        return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
    }
    bool one_in(std::size_t n) { return pick(n) == 0; }

    void space(std::string& out) {
        static constexpr std::string_view spaces[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "  "};
        out += spaces[pick(std::size(spaces))];
    }

    void value(std::string& out, int depth) {
        const std::size_t kind = pick(depth < 5 ? 8 : 6);
        if (kind < 2) return string(out);
        if (kind < 4) return number(out);
        if (kind == 4) {
            static constexpr std::string_view words[] = {"true", "false", "null"};
            out += words[pick(3)];
            return;
        }
        if (kind == 5 && !one_in(20)) return number(out);
        container(out, depth, kind == 6 || kind == 5);
    }

    void container(std::string& out, int depth, bool object) {
        out += object ? '{' : '[';
        space(out);
        const std::size_t n = pick(6);
        for (std::size_t i = 0; i < n; ++i) {
            if (i > 0) {
                out += ',';
                space(out);
            }
            if (object) {
                key(out);
                space(out);
                out += ':';
                space(out);
            }
            value(out, depth + 1);
            space(out);
        }
        out += object ? '}' : ']';
    }

    void key(std::string& out) {
        static constexpr std::string_view keys[] = {"\"a\"",         "\"b\"", "\"model\"",
                                                    "\"messages\"",  "\"\"",  "\"k\\u00e9\"",
                                                    "\"k\xC3\xA9\"", "\"z\""};
        if (one_in(3)) return string(out);
        out += keys[pick(std::size(keys))];
    }

    void string(std::string& out) {
        out += '"';
        const std::size_t pieces = pick(6);
        for (std::size_t i = 0; i < pieces; ++i) string_piece(out);
        out += '"';
    }

    void string_piece(std::string& out) {
        static constexpr std::string_view plain[] = {
            "hello", "You are a helpful assistant.", " ", "#42", "\x7F", "a/b", "'single'"};
        static constexpr std::string_view escapes[] = {"\\\"", "\\\\", "\\/", "\\b",
                                                       "\\f",  "\\n",  "\\r", "\\t"};
        static constexpr std::string_view utf8[] = {
            "\xC3\xA9",     "\xE2\x82\xAC",     "\xF0\x9F\x98\x80", "\xC2\x80",
            "\xEF\xBF\xBF", "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"};
        static constexpr std::string_view wrong[] = {
            "\\x", "\x01", "\xC0\x80", "\xED\xA0\x80", "\\uD800", "\\uDC00", "\xFF", "\\u12"};
        const std::size_t roll = pick(16);
        if (roll < 4) {
            out += plain[pick(std::size(plain))];
        } else if (roll < 7) {
            out += escapes[pick(std::size(escapes))];
        } else if (roll < 9) {
            out += utf8[pick(std::size(utf8))];
        } else if (roll < 11) {
            unicode_escape(out);
        } else if (roll == 11) {
            ascii(out);
        } else if (roll == 12) {
            raw_code_point(out);
        } else if (roll == 13 && one_in(8)) {
            out += wrong[pick(std::size(wrong))];
        } else {
            out += "text";
        }
    }

    void ascii(std::string& out) {
        const auto c = static_cast<char>(0x20 + pick(0x60));
        out += c == '"' || c == '\\' ? 'q' : c;
    }

    void unicode_escape(std::string& out) {
        static constexpr char hex[] = "0123456789abcdefABCDEF";
        const auto four = [&](std::uint32_t v) {
            const bool upper = one_in(2);
            for (int shift = 12; shift >= 0; shift -= 4) {
                const auto d = (v >> shift) & 0xF;
                out += hex[d < 10 || !upper ? d : d + 6];
            }
        };
        out += "\\u";
        const std::size_t kind = pick(4);
        if (kind == 0) {  // a surrogate pair
            four(0xD800 + static_cast<std::uint32_t>(pick(0x400)));
            out += "\\u";
            four(0xDC00 + static_cast<std::uint32_t>(pick(0x400)));
        } else if (kind == 1) {
            four(static_cast<std::uint32_t>(pick(0x80)));
        } else {
            auto cp = static_cast<std::uint32_t>(pick(0x10000));
            if (cp >= 0xD800 && cp < 0xE000 && !one_in(10)) cp -= 0x800;
            four(cp);
        }
    }

    void raw_code_point(std::string& out) {
        auto cp = static_cast<std::uint32_t>(0x80 + pick(0x10FF80));
        if (cp >= 0xD800 && cp < 0xE000) cp += 0x800;
        if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        }
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }

    void digits(std::string& out, std::size_t n, bool leading_zero_ok) {
        for (std::size_t i = 0; i < n; ++i) {
            out += static_cast<char>(
                '0' + (i == 0 && !leading_zero_ok && n > 1 ? 1 + pick(9) : pick(10)));
        }
    }

    void number(std::string& out) {
        static constexpr std::string_view special[] = {"-0",
                                                       "0",
                                                       "-0.0",
                                                       "1e308",
                                                       "1e309",
                                                       "-1e309",
                                                       "4.9e-324",
                                                       "2.4e-324",
                                                       "1e-400",
                                                       "1.7976931348623157e308",
                                                       "2.2250738585072011e-308",
                                                       "9223372036854775807",
                                                       "9223372036854775808",
                                                       "-9223372036854775808",
                                                       "-9223372036854775809",
                                                       "18446744073709551615",
                                                       "18446744073709551616",
                                                       "999999999999999999",
                                                       "1000000000000000000",
                                                       "-999999999999999999",
                                                       "0.1",
                                                       "1E+2",
                                                       "1e-0",
                                                       "01",
                                                       "1.",
                                                       "-",
                                                       ".5",
                                                       "1e"};
        if (one_in(5)) {
            out += special[pick(std::size(special))];
            return;
        }
        if (one_in(2)) out += '-';
        digits(out, 1 + pick(one_in(4) ? 24 : 6), one_in(30));
        if (one_in(3)) {
            out += '.';
            digits(out, 1 + pick(one_in(4) ? 30 : 4), true);
        }
        if (one_in(4)) {
            out += one_in(2) ? 'e' : 'E';
            if (!one_in(3)) out += one_in(2) ? '+' : '-';
            digits(out, 1 + pick(3), true);
        }
    }

    std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("parse_json matches nlohmann on random documents and their mutations") {
    json_generator gen(20261130);
    std::size_t texts = 0, valid = 0, failures = 0;
    const auto check = [&](const std::string& text) {
        ++texts;
        if (!json::parse(text, nullptr, false).is_discarded()) ++valid;
        if (!agrees(text)) ++failures;
    };
    for (int i = 0; i < 3000; ++i) {
        std::vector<std::string> forms{gen.document()};
        const json doc = json::parse(forms[0], nullptr, false);
        if (!doc.is_discarded()) {
            forms.push_back(doc.dump());
            forms.push_back(doc.dump(2));
            forms.push_back(doc.dump(-1, ' ', true));
        }
        for (const auto& form : forms) {
            check(form);
            for (int m = 0; m < 3; ++m) check(gen.mutate(form));
        }
    }
    CHECK(failures == 0);
    MESSAGE("texts ", texts, ", valid ", valid);
    CHECK(valid > texts / 4);
    CHECK(valid < texts);
}
