// Which client requests warmslot serves, and how: the one place a request is classified
// (endpoint kind, API shape, error dialect). Pure: no sockets, no Beast.
#pragma once

#include <string_view>

namespace warmslot::api {

enum class endpoint_kind {
    forward_json,        // POST with a JSON body, passed to a backend
    forward_get,         // GET passed to a backend
    health,              // GET /health: warmslot and its backends
    metrics,             // GET /metrics: warmslot's Prometheus counters
    not_found,           // unknown path
    method_not_allowed,  // known path, wrong method
    slot_action,         // POST /slots/...: warmslot's own tool, never exposed to clients
    admin,               // POST /admin/...: warmslot's own admin calls (service/admin.cpp)
    explain,             // POST /warmslot/explain: the rewritten request and the plan, not run
    dashboard,           // GET /warmslot/...: the dashboard page, its files and status JSON
};

// The request shape of a forwarded JSON body: what the cache can read a prompt from.
enum class api_shape {
    none,        // no prompt the cache understands (embeddings, tokenize, count_tokens, ...)
    chat,        // OpenAI Chat Completions: "messages"
    completion,  // llama-server and OpenAI completions: "prompt"
    responses,   // OpenAI Responses: "instructions", "input", "tools"
    messages,    // Anthropic Messages: "system", "messages", "tools"
};

// The shape of warmslot's own error answers on an endpoint.
enum class error_dialect {
    openai,     // {"error":{"code","message","type"}}, as llama-server answers
    anthropic,  // {"type":"error","error":{"type","message"}} on /v1/messages*
};

struct endpoint {
    endpoint_kind kind;
    bool needs_auth = true;  // false only for /health and the dashboard's page and files (no data)
    api_shape shape = api_shape::none;
    error_dialect dialect = error_dialect::openai;
};

// Classifies a request by method and target (the query string is ignored for matching).
endpoint classify(std::string_view method, std::string_view target) noexcept;

// The path part of a request target: everything before '?' or '#'.
std::string_view path_of(std::string_view target) noexcept;

// The shape's name for headers and logs ("chat", "messages", ...).
std::string_view name(api_shape shape) noexcept;

}  // namespace warmslot::api
