// Parsing of host:port addresses and backend URLs for the config module. Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace warmslot::config::detail {

bool is_digit(char c);
bool is_alnum(char c);
bool is_digits(std::string_view text);  // non-empty and only 0-9
// IP address literals as inet_pton accepts them (written here: it is not portable).
bool is_ipv4_literal(std::string_view host);
bool is_ipv6_literal(std::string_view host);

// Each returns the problem, or std::nullopt when the text is valid (and fills `out`).
std::optional<std::string> parse_listen(std::string_view text, listen_address& out);
std::optional<std::string> parse_backend_url(std::string_view url, backend& out);

}  // namespace warmslot::config::detail
