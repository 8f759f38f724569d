#include "api/forward_headers.hpp"

#include <array>

namespace warmslot::api {
namespace {

// ASCII only, as header names are: std::tolower is a locale-aware call per character.
constexpr char lower(char c) noexcept {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// `b` is already lower case.
bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (lower(a[i]) != b[i]) return false;
    }
    return true;
}

constexpr std::array<std::string_view, 9> hop_by_hop = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
};

bool listed(std::string_view name, const auto& list) noexcept {
    for (auto h : list) {
        if (iequals(name, h)) return true;
    }
    return false;
}

}  // namespace

bool forward_request_header(std::string_view name) noexcept {
    constexpr std::array<std::string_view, 6> own = {
        "host", "content-length", "authorization", "x-api-key", "x-conversation-id", "expect",
    };
    return !listed(name, hop_by_hop) && !listed(name, own);
}

bool forward_response_header(std::string_view name) noexcept {
    constexpr std::array<std::string_view, 2> own = {"content-length", "server"};
    // llama-server reflects any Origin: warmslot's own CORS policy decides (service/gate.cpp).
    constexpr std::string_view cors = "access-control-";
    if (name.size() >= cors.size() && iequals(name.substr(0, cors.size()), cors)) return false;
    return !listed(name, hop_by_hop) && !listed(name, own);
}

}  // namespace warmslot::api
