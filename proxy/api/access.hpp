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
// JSON: application/json or application/<anything>+json, with parameters. Refused are an
// absent type (a fetch() of bytes or a Blob sends none), text/plain, forms and the rest: the
// types a browser sends cross-site without a preflight.
bool json_content_type(std::string_view value) noexcept;

// The host part of a Host header: without the port, brackets, a trailing dot; lower case
// is left to the comparison.
std::string_view host_name(std::string_view header) noexcept;

// Whether a request whose Host header is `header` may be served; "" (empty) never is (the
// caller lets an HTTP/1.0 request without the header pass: no browser sends one). `allowed` as
// configured (http.allowed_hosts); `set` false means not configured, and then a loopback
// listener accepts `localhost` and its own address only, any other listener `localhost` and
// addresses (a name must be listed: a name is what DNS rebinding brings).
bool host_allowed(std::string_view header, const std::vector<std::string>& allowed, bool set,
                  std::string_view listen_host) noexcept;

// Whether a host (as host_name gives it) is an IPv4 or IPv6 address literal.
bool address_literal(std::string_view host) noexcept;

// Whether a listen host is a loopback address or name.
bool loopback_host(std::string_view host) noexcept;

// Whether `origin` (the Origin header) is one of `origins`, exactly, ignoring ASCII case.
bool origin_allowed(std::string_view origin, const std::vector<std::string>& origins) noexcept;

// What a browser says about where a request comes from (each "" when absent).
struct request_site {
    std::string_view origin;      // Origin
    std::string_view fetch_site;  // Sec-Fetch-Site: same-origin, same-site, cross-site, none
    std::string_view fetch_mode;  // Sec-Fetch-Mode: navigate, cors, no-cors, ...
    std::string_view host;        // Host
    bool safe_method = false;     // GET or HEAD
};

// Whether a request comes from a page of another origin that `cors_origins` does not list: an
// Origin that is neither this listener's own (scheme://<Host header>, either scheme) nor listed
// ("null" included), or Sec-Fetch-Site: cross-site without a listed Origin. A GET or HEAD that
// navigates (a link the user follows) is not refused: it sends no body and the page that linked
// cannot read the answer. Clients that are not browsers send neither header and pass.
bool cross_site(const request_site& r, const std::vector<std::string>& cors_origins) noexcept;

}  // namespace warmslot::api
