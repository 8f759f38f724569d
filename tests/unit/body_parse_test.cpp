// What a large request body costs when parse_json reads it: a string with escapes is allocated
// once, at its final size, and ends where nlohmann ends it.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/json_parse.hpp"
#include "json_same.hpp"

using nlohmann::json;
using warmslot::api::parse_json;

namespace {

// A document of `lines` lines of text, each ending in an escaped newline, as a JSON client
// sends a text file; `escaped_bytes` gets the length of the string as written between quotes.
std::string document(std::size_t lines, std::size_t& escaped_bytes) {
    std::string text;
    for (std::size_t i = 0; i < lines; ++i) {
        text += "line " + std::to_string(i) + " of a document, with a \\\"quote\\\" in it\\n";
    }
    escaped_bytes = text.size();
    return R"({"messages":[{"role":"system","content":")" + text + R"("}]})";
}

}  // namespace

TEST_CASE("a long string with escapes is allocated once, no larger than its escaped text") {
    std::size_t escaped = 0;
    // About 1 MB decoded: just past a doubling of a string grown from empty, which then has
    // nearly twice the room it needs.
    const std::string body = document(22000, escaped);
    const json parsed = parse_json(body);
    REQUIRE(json_same(parsed, json::parse(body)));
    const auto& content = parsed["messages"][0]["content"].get_ref<const std::string&>();
    CHECK(content.size() < escaped);
    CHECK(content.capacity() <= escaped);
}

TEST_CASE("a string ends at the first quote that no backslash escapes") {
    // Runs of backslashes before a quote: an even run leaves the quote closing the string.
    const std::string_view cases[] = {
        R"({"a":"x\\","b":1})",           R"({"a":"x\\\"y","b":1})",
        R"({"a":"\\\\\\","b":"\"\""})",   R"({"a":"\n\\\\\"\\"})",
        R"(["\\\\\\\"",1,"\\"])",         R"({"a":"\n never closed \\"})",
        R"({"a":"\n never closed \\\"})", R"({"a":"\n\u00e9\ud83d\ude00 tail"})",
    };
    for (const auto text : cases) {
        CAPTURE(text);
        CHECK(json_same(parse_json(text), json::parse(text, nullptr, false)));
    }
}
