// Who may call what, and what a browser may make warmslot do: the role a key needs for each
// endpoint, the Content-Type rule for bodies read as JSON, the Host allow-list and the CORS
// origins. Pure: no sockets, no Beast; safe from any thread.
#pragma once

#include <string_view>
#include <vector>

#include "api/endpoints.hpp"
#include "config/config.hpp"

namespace warmslot::api {

// Whether `role` may call the endpoint `ep` at `path` (docs/security.md, "Keys, roles and
// tenants"). Admins may call everything; observers read /metrics and /warmslot/status;
// clients use the model API, explain and /warmslot/status; GET /slots (every slot's state) and
// /admin/* need an admin. Endpoints that need no key permit every role.
bool permits(config::key_role role, const endpoint& ep, std::string_view path) noexcept;

// Whether a body with this Content-Type (the header's value, "" when absent) may be read as
// JSON: absent, application/json or application/<anything>+json, with parameters. Refused are
// text/plain, forms and the rest: the types a browser sends cross-site without a preflight.
bool json_content_type(std::string_view value) noexcept;

// The host part of a Host header: without the port, brackets, a trailing dot; lower case
// is left to the comparison.
std::string_view host_name(std::string_view header) noexcept;

// Whether a request whose Host header is `header` ("" when absent: HTTP/1.0 clients) may be
// served. `allowed` as configured (http.allowed_hosts); `set` false means not configured, and
// then a loopback listener accepts only loopback names, any other accepts every host.
bool host_allowed(std::string_view header, const std::vector<std::string>& allowed, bool set,
                  std::string_view listen_host) noexcept;

// Whether a listen host is a loopback address or name.
bool loopback_host(std::string_view host) noexcept;

// Whether `origin` (the Origin header) is one of `origins`, exactly, ignoring ASCII case.
bool origin_allowed(std::string_view origin, const std::vector<std::string>& origins) noexcept;

}  // namespace warmslot::api
