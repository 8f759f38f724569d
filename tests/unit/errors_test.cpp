// The error table: every kind's status and type, the body's exact JSON shape, escaping, and the
// SSE framing used once a stream has started.
#include "api/errors.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using warmslot::api::error_kind;
namespace api = warmslot::api;

namespace {

struct expected_row {
    error_kind kind;
    std::string_view name;
    unsigned status;
    std::string_view type;
};

const std::vector<expected_row> expected_table = {
    {error_kind::invalid_json, "invalid_json", 400, "invalid_request_error"},
    {error_kind::bad_request, "bad_request", 400, "invalid_request_error"},
    {error_kind::unauthorized, "unauthorized", 401, "authentication_error"},
    {error_kind::not_found, "not_found", 404, "not_found_error"},
    {error_kind::method_not_allowed, "method_not_allowed", 405, "invalid_request_error"},
    {error_kind::payload_too_large, "payload_too_large", 413, "invalid_request_error"},
    {error_kind::headers_too_large, "headers_too_large", 431, "invalid_request_error"},
    {error_kind::request_timeout, "request_timeout", 408, "timeout_error"},
    {error_kind::backend_unreachable, "backend_unreachable", 502, "server_error"},
    {error_kind::backend_bad_response, "backend_bad_response", 502, "server_error"},
    {error_kind::backend_unavailable, "backend_unavailable", 503, "unavailable_error"},
    {error_kind::overloaded, "overloaded", 503, "unavailable_error"},
    {error_kind::upstream_timeout, "upstream_timeout", 504, "timeout_error"},
    {error_kind::internal, "internal", 500, "server_error"},
    {error_kind::forbidden, "forbidden", 403, "permission_error"},
    {error_kind::unsupported_media_type, "unsupported_media_type", 415, "invalid_request_error"},
    {error_kind::misdirected, "misdirected", 421, "invalid_request_error"},
    {error_kind::rate_limited, "rate_limited", 429, "rate_limit_error"},
};

// Parses `body` and checks it is exactly {"error":{"code","message","type"}} for `row`.
void check_shape(const std::string& body, const expected_row& row, std::string_view message) {
    const auto json = nlohmann::json::parse(body);
    REQUIRE(json.is_object());
    REQUIRE(json.size() == 1);
    const auto& error = json.at("error");
    REQUIRE(error.is_object());
    CHECK(error.size() == 3);
    CHECK(error.at("code").is_number_unsigned());
    CHECK(error.at("code").get<unsigned>() == row.status);
    CHECK(error.at("type").get<std::string>() == row.type);
    CHECK(error.at("message").get<std::string>() == message);
}

}  // namespace

TEST_CASE("errors: every kind maps to its status, type and name") {
    REQUIRE(expected_table.size() == api::all_error_kinds.size());
    std::set<std::string_view> names;
    for (std::size_t i = 0; i < expected_table.size(); ++i) {
        const expected_row& row = expected_table[i];
        INFO(row.name);
        CHECK(api::all_error_kinds[i] == row.kind);
        const api::error_info info = api::describe(row.kind);
        CHECK(info.status == row.status);
        CHECK(info.type == row.type);
        CHECK(api::name(row.kind) == row.name);
        names.insert(api::name(row.kind));
        check_shape(api::error_body(row.kind, "something went wrong"), row, "something went wrong");
    }
    CHECK(names.size() == expected_table.size());
}

TEST_CASE("errors: a value outside the enum is described as internal") {
    const auto bogus = static_cast<error_kind>(999);
    CHECK(api::describe(bogus).status == 500);
    CHECK(api::describe(bogus).type == "server_error");
    CHECK(api::name(bogus) == "internal");
}

TEST_CASE("errors: body is compact, one line, in llama-server's key order") {
    CHECK(api::error_body(error_kind::not_found, "no route /v2/x") ==
          R"({"error":{"code":404,"message":"no route /v2/x","type":"not_found_error"}})");
}

TEST_CASE("errors: messages are escaped") {
    const expected_row& row = expected_table.front();
    const std::vector<std::string> messages = {
        "",
        R"(unexpected "quote" and \backslash)",
        "line one\nline two\r\nline three\ttab",
        std::string("nul \0 and bell \a", 16),
        "プロンプトが長すぎます（7,243 トークン）",
        "emoji \xF0\x9F\x98\x80 ok",
        R"({"error":{"code":1}} </script>)",
    };
    for (const std::string& message : messages) {
        INFO(message);
        const std::string body = api::error_body(row.kind, message);
        CHECK(body.find('\n') == std::string::npos);
        CHECK(body.find('\r') == std::string::npos);
        check_shape(body, row, message);
    }
    // UTF-8 stays readable rather than \u-escaped.
    CHECK(api::error_body(row.kind, "日本語").find("日本語") != std::string::npos);
}

TEST_CASE("errors: invalid UTF-8 in a message is replaced, not thrown") {
    const std::string body = api::error_body(error_kind::backend_bad_response, "bad \xC3\x28 byte");
    const auto json = nlohmann::json::parse(body);
    CHECK(json["error"]["message"].get<std::string>() == "bad \xEF\xBF\xBD( byte");
}

TEST_CASE("errors: sse_error_event is one data line and a blank line") {
    for (const expected_row& row : expected_table) {
        INFO(row.name);
        const std::string message = "stream broke:\n\"upstream\" closed";
        const std::string event = api::sse_error_event(row.kind, message);
        const std::string prefix = "data: ";
        REQUIRE(event.size() > prefix.size() + 2);
        CHECK(event.substr(0, prefix.size()) == prefix);
        CHECK(event.substr(event.size() - 2) == "\n\n");
        const std::string body = event.substr(prefix.size(), event.size() - prefix.size() - 2);
        CHECK(body.find_first_of("\r\n") == std::string::npos);
        CHECK(body == api::error_body(row.kind, message));
        check_shape(body, row, message);
    }
}
