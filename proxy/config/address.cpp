#include "config/address.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace warmslot::config::detail {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c); }

bool is_digits(std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_digit);
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

bool is_ip_literal(const std::string& host, int family) {
    std::array<unsigned char, 16> buffer{};
    return inet_pton(family, host.c_str(), buffer.data()) == 1;
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
        if (!is_ip_literal(out.host, AF_INET6)) return "invalid IPv6 address in brackets";
        rest = text.substr(close + 1);
    } else {
        const std::size_t colon = text.find(':');
        out.host = std::string(text.substr(0, colon));
        if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos)
            return "an IPv6 address needs brackets, e.g. [::1]:8080";
        if (out.host.empty()) return "missing host";
        const bool ok = is_ip_literal(out.host, AF_INET) || out.host == "localhost" ||
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
