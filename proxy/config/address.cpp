#include "config/address.hpp"

#include <algorithm>
#include <charconv>

namespace warmslot::config::detail {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c); }

bool is_digits(std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_digit);
}

// Dotted-quad IPv4 in the strict form inet_pton accepts: four decimal parts 0..255, no
// leading zeros.
bool is_ipv4_literal(std::string_view host) {
    int parts = 0;
    std::size_t start = 0;
    while (true) {
        const std::size_t dot = host.find('.', start);
        const auto part = host.substr(start, dot == std::string_view::npos ? dot : dot - start);
        if (!is_digits(part) || part.size() > 3 || (part.size() > 1 && part[0] == '0')) {
            return false;
        }
        unsigned value = 0;
        std::from_chars(part.data(), part.data() + part.size(), value);
        if (value > 255 || ++parts > 4) return false;
        if (dot == std::string_view::npos) return parts == 4;
        start = dot + 1;
    }
}

bool is_hex_group(std::string_view group) {
    return !group.empty() && group.size() <= 4 &&
           std::all_of(group.begin(), group.end(), [](char c) {
               return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
           });
}

// IPv6 text form (RFC 4291 2.2): eight hex groups, at most one "::" for a run of zero
// groups, optionally ending in a dotted-quad IPv4 address that counts as two groups.
bool is_ipv6_literal(std::string_view host) {
    const std::size_t gap = host.find("::");
    if (gap != std::string_view::npos && host.find("::", gap + 1) != std::string_view::npos) {
        return false;
    }
    int groups = 0;
    auto count = [&groups](std::string_view side, bool last) {
        if (side.empty()) return true;
        std::size_t start = 0;
        while (true) {
            const std::size_t colon = side.find(':', start);
            const auto group =
                side.substr(start, colon == std::string_view::npos ? colon : colon - start);
            if (colon == std::string_view::npos && last && group.find('.') != group.npos) {
                groups += 2;
                return is_ipv4_literal(group);
            }
            if (!is_hex_group(group)) return false;
            ++groups;
            if (colon == std::string_view::npos) return true;
            start = colon + 1;
        }
    };
    if (gap == std::string_view::npos) return count(host, true) && groups == 8;
    return count(host.substr(0, gap), false) && count(host.substr(gap + 2), true) && groups <= 7;
}

namespace {

// Parses "<min>".."65535"; std::nullopt for anything else.
std::optional<std::uint16_t> parse_port(std::string_view text, unsigned min) {
    unsigned value = 0;
    if (!is_digits(text) || text.size() > 5) return std::nullopt;
    std::from_chars(text.data(), text.data() + text.size(), value);
    if (value < min || value > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

bool is_dns_name(std::string_view host) {
    if (host.empty() || host.size() > 253) return false;
    std::size_t label = 0;
    for (std::size_t i = 0; i <= host.size(); ++i) {
        const bool end = i == host.size() || host[i] == '.';
        if (end) {
            if (label == 0 || label > 63 || host[i - 1] == '-' || host[i - label] == '-') {
                return false;
            }
            label = 0;
            continue;
        }
        if (!is_alnum(host[i]) && host[i] != '-') return false;
        ++label;
    }
    return true;
}

// What an address may look like: listen takes literals only, backends also take DNS names.
struct address_rules {
    bool names_allowed;
    unsigned min_port;
};

struct host_port {
    std::string host;  // IPv6 without its brackets
    std::optional<std::uint16_t> port;
};

// Splits "host:port" or "[v6]:port"; the port may be missing ("host", "[v6]").
// Returns the problem, if any.
std::optional<std::string> split_host_port(std::string_view text, address_rules rules,
                                           host_port& out) {
    std::string_view rest;
    if (!text.empty() && text.front() == '[') {
        const std::size_t close = text.find(']');
        if (close == std::string_view::npos) return "missing ']' after the IPv6 address";
        out.host = std::string(text.substr(1, close - 1));
        if (!is_ipv6_literal(out.host)) return "invalid IPv6 address in brackets";
        rest = text.substr(close + 1);
    } else {
        const std::size_t colon = text.find(':');
        out.host = std::string(text.substr(0, colon));
        if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos)
            return "an IPv6 address needs brackets, e.g. [::1]:8080";
        if (out.host.empty()) return "missing host";
        const bool ok = is_ipv4_literal(out.host) || out.host == "localhost" ||
                        (rules.names_allowed && is_dns_name(out.host));
        if (!ok) {
            return rules.names_allowed
                       ? "invalid host name"
                       : "host must be an IPv4 address, localhost or [IPv6 address]";
        }
        rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon);
    }
    if (rest.empty()) return std::nullopt;
    if (rest.front() != ':') return "unexpected text after the host";
    out.port = parse_port(rest.substr(1), rules.min_port);
    if (!out.port)
        return "port must be a number from " + std::to_string(rules.min_port) + " to 65535";
    return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_listen(std::string_view text, listen_address& out) {
    host_port hp;
    if (auto problem = split_host_port(text, {false, 0}, hp)) return problem;
    if (!hp.port) return "expected host:port, e.g. 127.0.0.1:8080";
    out.host = hp.host;
    out.port = *hp.port;
    return std::nullopt;
}

std::optional<std::string> parse_backend_url(std::string_view url, backend& out) {
    constexpr std::string_view scheme = "http://";
    if (url.starts_with("https://"))
        return "https is not supported; llama-server is reached over plain http://";
    if (!url.starts_with(scheme)) return "must start with http://, e.g. http://127.0.0.1:8081";
    std::string_view authority = url.substr(scheme.size());
    if (authority.ends_with('/')) authority.remove_suffix(1);
    if (authority.find('@') != std::string_view::npos) return "must not contain user info";
    if (authority.find_first_of("?#") != std::string_view::npos)
        return "must not have a query or fragment; expected http://host:port";
    if (authority.find('/') != std::string_view::npos)
        return "must not have a path; expected http://host:port";
    host_port hp;
    if (auto problem = split_host_port(authority, {true, 1}, hp)) return problem;
    out.host = hp.host;
    out.port = hp.port.value_or(80);
    return std::nullopt;
}

}  // namespace warmslot::config::detail
