// The checks made on a request's header before its body is read: the Host allow-list, where a
// browser says the request comes from (Origin, Sec-Fetch-Site), the key
// and its role, the Content-Type of bodies read as JSON; and warmslot's own CORS answers. The
// rules are pure (api/access.hpp); this file reads them off the request.
#include "api/access.hpp"
#include "service/pipeline.hpp"
#include "util/secrets.hpp"

namespace warmslot::service {
namespace {

// The caller when no keys are configured (anyone may do anything, as one tenant), and the
// grant of a plain key.
const config::key_grant open_grant{config::key_role::admin, ""};

std::string_view bearer_token(std::string_view header) {
    constexpr std::string_view prefix = "Bearer ";
    if (header.size() > prefix.size() && header.substr(0, prefix.size()) == prefix) {
        return header.substr(prefix.size());
    }
    return {};
}

// Endpoints whose body warmslot reads; every other one is answered without reading it.
bool reads_body(const api::endpoint& ep) {
    return ep.kind == api::endpoint_kind::forward_json || ep.kind == api::endpoint_kind::explain ||
           ep.kind == api::endpoint_kind::admin;
}

}  // namespace

gate pipeline::screen(const config::config& cfg, const api::endpoint& ep,
                      const http::request_header<>& req, const config::key_grant** who) const {
    // Every request names its host, empty names included; only an HTTP/1.0 request may leave
    // the header out (no browser does).
    const bool host_sent = req.find(http::field::host) != req.end();
    if ((host_sent || req.version() >= 11) &&
        !api::host_allowed(std::string_view(req[http::field::host]), cfg.http.allowed_hosts,
                           cfg.http.allowed_hosts_set, cfg.listen.host))
        return gate::misdirected;
    const api::request_site site{
        std::string_view(req[http::field::origin]), std::string_view(req["Sec-Fetch-Site"]),
        std::string_view(req["Sec-Fetch-Mode"]), std::string_view(req[http::field::host]),
        req.method() == http::verb::get || req.method() == http::verb::head};
    if (api::cross_site(site, cfg.http.cors_origins)) return gate::cross_site;
    const config::key_grant* grant = &open_grant;
    if (!cfg.api_keys.empty()) {
        std::string_view given = bearer_token(std::string_view(req[http::field::authorization]));
        if (given.empty()) given = std::string_view(req["X-Api-Key"]);
        const auto i =
            given.empty() ? cfg.api_keys.size() : util::matching_key(given, cfg.api_keys);
        // A key without a grant (a config built in code) is a plain key: an admin.
        grant = i >= cfg.api_keys.size()    ? nullptr
                : i < cfg.key_grants.size() ? &cfg.key_grants[i]
                                            : &open_grant;
    }
    if (who) *who = grant;
    if (!ep.needs_auth) return gate::pass;
    if (!grant) return gate::unauthorized;
    const auto path = api::path_of(std::string_view(req.target()));
    if (!api::permits(grant->role, ep, path)) return gate::forbidden;
    if (reads_body(ep) && !api::json_content_type(std::string_view(req[http::field::content_type])))
        return gate::media_type;
    return gate::pass;
}

// The server's screen: the body is read only for the endpoints that use it, once every check
// on the header has passed.
bool pipeline::admits(const http::request_header<>& head) const {
    const auto cfg = src_.current();
    const auto ep =
        api::classify(std::string_view(head.method_string()), std::string_view(head.target()));
    return reads_body(ep) && screen(*cfg, ep, head, nullptr) == gate::pass;
}

void pipeline::cors_headers(const config::config& cfg, http_server::exchange& ex) {
    if (cfg.http.cors_origins.empty()) return;
    const std::string_view origin(ex.request[http::field::origin]);
    ex.response_headers.emplace_back("Vary", "Origin");
    if (!api::origin_allowed(origin, cfg.http.cors_origins)) return;
    ex.response_headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    ex.response_headers.emplace_back("Access-Control-Expose-Headers",
                                     "X-Warmslot-Request-Id, X-Warmslot-Route, "
                                     "X-Warmslot-Cached-Tokens, X-Warmslot-Processed-Tokens");
}

// OPTIONS: a CORS preflight. An allowed origin learns what it may send; any other request
// gets 204 without CORS headers, which a browser reads as a refusal.
awaitable<void> pipeline::preflight(http_server::exchange& ex, outcome& out) {
    const auto& cfg = *out.cfg;
    http::response<http::empty_body> res{http::status::no_content, 11};
    for (const auto& [name, value] : ex.response_headers) res.set(name, value);
    if (api::origin_allowed(std::string_view(ex.request[http::field::origin]),
                            cfg.http.cors_origins)) {
        res.set(http::field::access_control_allow_methods, "GET, POST");
        res.set(http::field::access_control_allow_headers,
                "Authorization, Content-Type, X-Api-Key, X-Warmslot-Label");
        res.set(http::field::access_control_max_age, "600");
    }
    res.set("X-Warmslot-Request-Id", ex.id);
    res.keep_alive(ex.keep_alive);
    res.prepare_payload();
    out.status = 204;
    ex.client->expires_after(cfg.timeouts.stream_idle);
    auto [ec, n] = co_await http::async_write(*ex.client, res, nothrow);
    if (ec) ex.keep_alive = false;
}

}  // namespace warmslot::service
