#include "api/forward_headers.hpp"

#include <array>
#include <cctype>

namespace warmslot::api {
namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i]))) {
            return false;
        }
    }
    return true;
}

constexpr std::array<std::string_view, 9> hop_by_hop = {
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te",         "trailer",    "transfer-encoding", "upgrade",
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
    return !listed(name, hop_by_hop) && !listed(name, own);
}

}  // namespace warmslot::api
