#include "api/errors.hpp"

#include <cstddef>
#include <nlohmann/json.hpp>

namespace warmslot::api {

namespace {

struct row {
    error_kind kind;
    std::string_view name;
    error_info info;
};

constexpr std::string_view invalid_request = "invalid_request_error";

// The one table. Rows are in enum order (checked below), so a kind indexes its row.
// Anthropic's types: invalid_request_error, authentication_error, not_found_error,
// request_too_large, timeout_error, rate_limit_error, api_error, overloaded_error.
constexpr std::array<row, all_error_kinds.size()> table{{
    {error_kind::invalid_json, "invalid_json", {400, invalid_request, invalid_request}},
    {error_kind::bad_request, "bad_request", {400, invalid_request, invalid_request}},
    {error_kind::unauthorized,
     "unauthorized",
     {401, "authentication_error", "authentication_error"}},
    {error_kind::not_found, "not_found", {404, "not_found_error", "not_found_error"}},
    {error_kind::method_not_allowed, "method_not_allowed", {405, invalid_request, invalid_request}},
    {error_kind::payload_too_large,
     "payload_too_large",
     {413, invalid_request, "request_too_large"}},
    {error_kind::headers_too_large,
     "headers_too_large",
     {431, invalid_request, "request_too_large"}},
    {error_kind::request_timeout, "request_timeout", {408, "timeout_error", "timeout_error"}},
    {error_kind::backend_unreachable, "backend_unreachable", {502, "server_error", "api_error"}},
    {error_kind::backend_bad_response, "backend_bad_response", {502, "server_error", "api_error"}},
    {error_kind::backend_unavailable,
     "backend_unavailable",
     {503, "unavailable_error", "overloaded_error"}},
    {error_kind::overloaded, "overloaded", {503, "unavailable_error", "overloaded_error"}},
    {error_kind::upstream_timeout, "upstream_timeout", {504, "timeout_error", "timeout_error"}},
    {error_kind::internal, "internal", {500, "server_error", "api_error"}},
    {error_kind::forbidden, "forbidden", {403, "permission_error", "permission_error"}},
    {error_kind::unsupported_media_type,
     "unsupported_media_type",
     {415, invalid_request, invalid_request}},
    {error_kind::misdirected, "misdirected", {421, invalid_request, invalid_request}},
    {error_kind::rate_limited, "rate_limited", {429, "rate_limit_error", "rate_limit_error"}},
}};

constexpr bool table_in_enum_order() {
    for (std::size_t i = 0; i < table.size(); ++i) {
        if (static_cast<std::size_t>(table[i].kind) != i || all_error_kinds[i] != table[i].kind) {
            return false;
        }
    }
    return true;
}
static_assert(table_in_enum_order(), "error table rows must follow error_kind order");

const row& lookup(error_kind kind) noexcept {
    const auto index = static_cast<std::size_t>(kind);
    return index < table.size() ? table[index]
                                : table[static_cast<std::size_t>(error_kind::internal)];
}

}  // namespace

error_info describe(error_kind kind) noexcept { return lookup(kind).info; }

std::string_view name(error_kind kind) noexcept { return lookup(kind).name; }

std::string error_body(error_kind kind, std::string_view message, error_dialect dialect) {
    const error_info info = describe(kind);
    nlohmann::json body;
    if (dialect == error_dialect::anthropic) {
        body = {{"type", "error"},
                {"error", {{"type", info.anthropic_type}, {"message", message}}}};
    } else {
        body = {{"error", {{"code", info.status}, {"message", message}, {"type", info.type}}}};
    }
    // Compact dump: one line, control characters escaped, so the body is also a valid SSE
    // data line. `replace` keeps a stray invalid UTF-8 byte from turning into an exception.
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_error_event(error_kind kind, std::string_view message, error_dialect dialect) {
    std::string out = dialect == error_dialect::anthropic ? "event: error\ndata: " : "data: ";
    out += error_body(kind, message, dialect);
    out += "\n\n";
    return out;
}

}  // namespace warmslot::api
