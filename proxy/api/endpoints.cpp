#include "api/endpoints.hpp"

#include <array>
#include <cstring>

namespace warmslot::api {
namespace {

struct json_post {
    std::string_view path;
    api_shape shape;
};

// Every POST endpoint of the pinned llama-server that takes a JSON body and that clients may
// use (tools/server/server.cpp). Left out on purpose: /slots/* (warmslot's own tool),
// POST /lora-adapters and POST /props (they change the server for every slot behind warmslot's
// back), the router's /models/*, multipart /v1/audio/transcriptions and the stream resumption
// endpoints (they go with X-Conversation-Id, which warmslot does not forward).
constexpr std::array<json_post, 25> json_posts = {{
    {"/v1/chat/completions", api_shape::chat},
    {"/chat/completions", api_shape::chat},
    {"/v1/completions", api_shape::completion},
    {"/completions", api_shape::completion},
    {"/completion", api_shape::completion},
    {"/v1/responses", api_shape::responses},
    {"/responses", api_shape::responses},
    {"/v1/messages", api_shape::messages},
    {"/v1/messages/count_tokens", api_shape::none},
    {"/v1/chat/completions/input_tokens", api_shape::none},
    {"/chat/completions/input_tokens", api_shape::none},
    {"/v1/responses/input_tokens", api_shape::none},
    {"/responses/input_tokens", api_shape::none},
    {"/infill", api_shape::none},
    {"/v1/embeddings", api_shape::none},
    {"/embeddings", api_shape::none},
    {"/embedding", api_shape::none},
    {"/rerank", api_shape::none},
    {"/reranking", api_shape::none},
    {"/v1/rerank", api_shape::none},
    {"/v1/reranking", api_shape::none},
    {"/tokenize", api_shape::none},
    {"/detokenize", api_shape::none},
    {"/apply-template", api_shape::none},
    {"/v1/chat/completions/control", api_shape::none},
}};
constexpr std::array<std::string_view, 5> gets = {"/v1/models", "/models", "/props", "/slots",
                                                  "/lora-adapters"};

const json_post* find_post(std::string_view path) {
    for (const auto& p : json_posts) {
        if (p.path == path) return &p;
    }
    return nullptr;
}

bool contains(const auto& list, std::string_view path) {
    for (auto p : list) {
        if (p == path) return true;
    }
    return false;
}

error_dialect dialect_of(std::string_view path) {
    return path == "/v1/messages" || path.starts_with("/v1/messages/") ? error_dialect::anthropic
                                                                       : error_dialect::openai;
}

endpoint classify_path(std::string_view method, std::string_view path) noexcept {
    const bool get = method == "GET";
    const bool post = method == "POST";
    if (path == "/health" || path == "/v1/health") {
        return {get ? endpoint_kind::health : endpoint_kind::method_not_allowed, false};
    }
    if (path == "/metrics") {
        return {get ? endpoint_kind::metrics : endpoint_kind::method_not_allowed};
    }
    if (path.starts_with("/admin/")) {
        return {post ? endpoint_kind::admin : endpoint_kind::method_not_allowed};
    }
    if (path == "/warmslot/explain") {
        return {post ? endpoint_kind::explain : endpoint_kind::method_not_allowed};
    }
    if (path == "/warmslot" || path.starts_with("/warmslot/")) {  // its page, files and data
        if (get) return {endpoint_kind::dashboard, path == "/warmslot/status"};
        if (path == "/warmslot/status" || path.size() <= 10) {
            return {endpoint_kind::method_not_allowed};
        }
    }
    if (path.starts_with("/slots/")) {
        return {endpoint_kind::slot_action};
    }
    if (const auto* p = find_post(path)) {
        if (!post) return {endpoint_kind::method_not_allowed};
        return {endpoint_kind::forward_json, true, p->shape};
    }
    if (contains(gets, path)) {
        if (path == "/slots" && post) return {endpoint_kind::slot_action};
        return {get ? endpoint_kind::forward_get : endpoint_kind::method_not_allowed};
    }
    return {endpoint_kind::not_found};
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
    endpoint ep = classify_path(method, path);
    ep.dialect = dialect_of(path);
    return ep;
}

std::string_view name(api_shape shape) noexcept {
    switch (shape) {
        case api_shape::chat: return "chat";
        case api_shape::completion: return "completion";
        case api_shape::responses: return "responses";
        case api_shape::messages: return "messages";
        case api_shape::none: break;
    }
    return "none";
}

}  // namespace warmslot::api
