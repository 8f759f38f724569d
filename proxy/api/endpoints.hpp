// Which client requests warmslot serves, and how. Pure: no sockets, no Beast.
#pragma once

#include <string_view>

namespace warmslot::api {

enum class endpoint_kind {
    forward_json,       // POST with a JSON body, passed to a backend
    forward_get,        // GET passed to a backend
    health,             // GET /health: warmslot and its backends
    metrics,            // GET /metrics: warmslot's Prometheus counters
    not_found,          // unknown path
    method_not_allowed, // known path, wrong method
    slot_action,        // POST /slots/...: warmslot's own tool, never exposed to clients
    admin,              // POST /admin/...: warmslot's own admin calls (service/admin.cpp)
    explain,            // POST /warmslot/explain: the rewritten request and the plan, not run
    dashboard,          // GET /warmslot/...: the dashboard page, its files and status JSON
};

struct endpoint {
    endpoint_kind kind;
    bool needs_auth; // false only for /health and the dashboard's page and files (no data)
};

// Classifies a request by method and target (the query string is ignored for matching).
endpoint classify(std::string_view method, std::string_view target) noexcept;

// The path part of a request target: everything before '?' or '#'.
std::string_view path_of(std::string_view target) noexcept;

}  // namespace warmslot::api
