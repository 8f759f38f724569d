// The proxy's error table: every error the request path can report, with its HTTP status and an
// OpenAI-shaped body {"error":{"code":N,"message":"...","type":"..."}}, the dialect llama-server
// itself speaks (code = the HTTP status).
//
// Pure functions over a constant table: safe from any thread. Nothing here throws except
// std::bad_alloc.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "api/endpoints.hpp"

namespace warmslot::api {

enum class error_kind {
    invalid_json,            // 400: request body is not valid JSON
    bad_request,             // 400: valid JSON, unusable request
    unauthorized,            // 401: missing or wrong API key
    not_found,               // 404: unknown path
    method_not_allowed,      // 405
    payload_too_large,       // 413: body above the configured limit
    headers_too_large,       // 431: headers above the configured limit
    request_timeout,         // 408: the client was too slow sending its request
    backend_unreachable,     // 502: connect refused or connection reset by the backend
    backend_bad_response,    // 502: the backend's response could not be parsed
    backend_unavailable,     // 503: no backend healthy, or all still loading their model
    overloaded,              // 503: too many connections
    upstream_timeout,        // 504: the backend did not answer in time
    internal,                // 500: a bug or an unexpected state in the proxy
    forbidden,               // 403: a valid key whose role may not call this endpoint
    unsupported_media_type,  // 415: a body read as JSON sent with another Content-Type
    misdirected,             // 421: a Host header warmslot does not answer for
    rate_limited,            // 429: the tenant is over one of its limits (tenants.limits)
};

inline constexpr std::array all_error_kinds{
    error_kind::invalid_json,        error_kind::bad_request,
    error_kind::unauthorized,        error_kind::not_found,
    error_kind::method_not_allowed,  error_kind::payload_too_large,
    error_kind::headers_too_large,   error_kind::request_timeout,
    error_kind::backend_unreachable, error_kind::backend_bad_response,
    error_kind::backend_unavailable, error_kind::overloaded,
    error_kind::upstream_timeout,    error_kind::internal,
    error_kind::forbidden,           error_kind::unsupported_media_type,
    error_kind::misdirected,         error_kind::rate_limited,
};

struct error_info {
    unsigned status;                  // HTTP status, also the body's "code"
    std::string_view type;            // the body's "type", e.g. "invalid_request_error"
    std::string_view anthropic_type;  // the type in the Anthropic dialect, e.g. "api_error"
};

// Status and type of `kind`. A value outside the enum is described as `internal`.
[[nodiscard]] error_info describe(error_kind kind) noexcept;

// The enumerator's name ("invalid_json", ...) for logs and metrics labels.
[[nodiscard]] std::string_view name(error_kind kind) noexcept;

// {"error":{"code":N,"message":"<message>","type":"..."}} on one line (OpenAI dialect), or
// {"type":"error","error":{"type":"...","message":"<message>"}} (Anthropic dialect, the shape
// Anthropic's API and SDKs use). `message` is escaped as JSON; UTF-8 is kept as is and invalid
// UTF-8 bytes become U+FFFD.
[[nodiscard]] std::string error_body(error_kind kind, std::string_view message,
                                     error_dialect dialect = error_dialect::openai);

// The same body framed as one SSE event: how an error is reported once a stream has started
// and the status line is already sent. OpenAI: "data: <body>\n\n"; Anthropic: a named
// "event: error" with that body, as Anthropic streams report errors.
[[nodiscard]] std::string sse_error_event(error_kind kind, std::string_view message,
                                          error_dialect dialect = error_dialect::openai);

}  // namespace warmslot::api
