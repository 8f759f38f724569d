#include "api/endpoints.hpp"

#include <array>
#include <cstring>

namespace warmslot::api {
namespace {

constexpr std::array<std::string_view, 10> json_posts = {
    "/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions",
    "/v1/embeddings",       "/completion",       "/tokenize",       "/detokenize",
    "/apply-template",      "/embeddings",
};
constexpr std::array<std::string_view, 4> gets = {"/v1/models", "/models", "/props", "/slots"};

bool contains(const auto& list, std::string_view path) {
    for (auto p : list) {
        if (p == path) return true;
    }
    return false;
}

}  // namespace

std::string_view path_of(std::string_view target) noexcept {
    // Two memchr passes: find_first_of("?#") looks each character up in the set with a call.
    std::size_t end = target.size();
    if (end == 0) return target;
    if (const void* q = std::memchr(target.data(), '?', end)) {
        end = static_cast<std::size_t>(static_cast<const char*>(q) - target.data());
    }
    if (const void* h = std::memchr(target.data(), '#', end)) {
        end = static_cast<std::size_t>(static_cast<const char*>(h) - target.data());
    }
    return target.substr(0, end);
}

endpoint classify(std::string_view method, std::string_view target) noexcept {
    const auto path = path_of(target);
    const bool get = method == "GET";
    const bool post = method == "POST";
    if (path == "/health" || path == "/v1/health") {
        return {get ? endpoint_kind::health : endpoint_kind::method_not_allowed, false};
    }
    if (path == "/metrics") {
        return {get ? endpoint_kind::metrics : endpoint_kind::method_not_allowed, true};
    }
    if (path.starts_with("/admin/")) {
        return {post ? endpoint_kind::admin : endpoint_kind::method_not_allowed, true};
    }
    if (path == "/warmslot/explain") {
        return {post ? endpoint_kind::explain : endpoint_kind::method_not_allowed, true};
    }
    if (path == "/warmslot" || path.starts_with("/warmslot/")) {  // its page, files and data
        if (get) return {endpoint_kind::dashboard, path == "/warmslot/status"};
        if (path == "/warmslot/status" || path.size() <= 10)
            return {endpoint_kind::method_not_allowed, true};
    }
    if (path.starts_with("/slots/")) {
        return {endpoint_kind::slot_action, true};
    }
    if (contains(json_posts, path)) {
        return {post ? endpoint_kind::forward_json : endpoint_kind::method_not_allowed, true};
    }
    if (contains(gets, path)) {
        if (path == "/slots" && post) return {endpoint_kind::slot_action, true};
        return {get ? endpoint_kind::forward_get : endpoint_kind::method_not_allowed, true};
    }
    return {endpoint_kind::not_found, true};
}

}  // namespace warmslot::api
