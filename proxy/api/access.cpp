#include "api/access.hpp"

#include <array>

namespace warmslot::api {
namespace {

constexpr char lower(char c) noexcept {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

bool permits(config::key_role role, const endpoint& ep, std::string_view path) noexcept {
    using config::key_role;
    if (!ep.needs_auth || role == key_role::admin) return true;
    switch (ep.kind) {
        case endpoint_kind::admin: return false;
        case endpoint_kind::metrics: return role == key_role::observer;
        case endpoint_kind::dashboard:  // /warmslot/status, filtered to the caller's tenant
            return true;
        case endpoint_kind::forward_get: return role == key_role::client && path != "/slots";
        case endpoint_kind::forward_json:
        case endpoint_kind::explain: return role == key_role::client;
        case endpoint_kind::health:
        case endpoint_kind::not_found:
        case endpoint_kind::method_not_allowed:
        case endpoint_kind::slot_action: return true;  // answered the same for every caller
    }
    return false;
}

bool json_content_type(std::string_view value) noexcept {
    auto type = trim(value.substr(0, value.find(';')));
    constexpr std::string_view app = "application/";
    if (type.size() <= app.size() || !iequals(type.substr(0, app.size()), app)) return false;
    const auto sub = type.substr(app.size());
    return iequals(sub, "json") || (sub.size() > 5 && iequals(sub.substr(sub.size() - 5), "+json"));
}

std::string_view host_name(std::string_view header) noexcept {
    auto h = trim(header);
    if (h.starts_with('[')) {
        const auto close = h.find(']');
        return close == std::string_view::npos ? h : h.substr(1, close - 1);
    }
    const auto colon = h.find(':');
    if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos)
        h = h.substr(0, colon);
    if (h.ends_with('.')) h.remove_suffix(1);
    return h;
}

bool loopback_host(std::string_view host) noexcept {
    const auto h = host_name(host);
    return iequals(h, "localhost") || h == "::1" || h.starts_with("127.");
}

bool address_literal(std::string_view host) noexcept {
    if (host.empty()) return false;
    if (host.find(':') != std::string_view::npos) {  // IPv6 (host_name took off the brackets)
        for (const char c : host) {
            const bool hex =
                (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
            if (!hex && c != ':' && c != '.') return false;
        }
        return true;
    }
    int parts = 0;
    std::size_t digits = 0;
    for (const char c : host) {
        if (c == '.') {
            if (digits == 0) return false;
            ++parts;
            digits = 0;
        } else if (c >= '0' && c <= '9' && ++digits <= 3) {
            continue;
        } else {
            return false;
        }
    }
    return digits > 0 && parts == 3;
}

bool host_allowed(std::string_view header, const std::vector<std::string>& allowed, bool set,
                  std::string_view listen_host) noexcept {
    const auto name = host_name(header);
    if (name.empty()) return false;
    if (!set) {
        if (iequals(name, "localhost")) return true;
        const auto listen = host_name(listen_host);
        if (!loopback_host(listen_host)) return address_literal(name);
        // A loopback listener: the address it listens on ("localhost" listens on 127.0.0.1).
        return iequals(name, iequals(listen, "localhost") ? "127.0.0.1" : listen);
    }
    for (const auto& a : allowed) {
        if (a == "*" || iequals(host_name(a), name)) return true;
    }
    return false;
}

bool origin_allowed(std::string_view origin, const std::vector<std::string>& origins) noexcept {
    if (origin.empty()) return false;
    for (const auto& o : origins) {
        if (iequals(o, origin)) return true;
    }
    return false;
}

bool cross_site(const request_site& r, const std::vector<std::string>& cors_origins) noexcept {
    if (r.safe_method && iequals(r.fetch_mode, "navigate")) return false;
    if (r.origin.empty()) return iequals(trim(r.fetch_site), "cross-site");
    if (origin_allowed(r.origin, cors_origins)) return false;
    const auto origin = trim(r.origin);
    const auto scheme_end = origin.find("://");
    if (scheme_end == std::string_view::npos) return true;  // "null", or not an origin at all
    const auto scheme = origin.substr(0, scheme_end);
    if (!iequals(scheme, "http") && !iequals(scheme, "https")) return true;
    const auto host = trim(r.host);
    return host.empty() || !iequals(origin.substr(scheme_end + 3), host);
}

}  // namespace warmslot::api
