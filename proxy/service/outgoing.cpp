#include "service/outgoing.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "api/forward_headers.hpp"
#include "upstream/llama_client.hpp"
#include "upstream/router_call.hpp"

namespace warmslot::service {

outgoing_body prepared_body(const std::string& body, const nlohmann::json* parsed,
                            std::optional<int> slot, const config::backend& b) {
    outgoing_body out;
    const bool client_pinned = parsed && parsed->contains("id_slot");
    // A router's model is named first: a `model` the client sent comes later and wins. Only
    // in a JSON object (never in a multipart upload that happens to hold a brace).
    const auto brace = body.find('{');
    const bool object = brace != std::string::npos && body.find_first_not_of(" \t\r\n") == brace;
    const std::string model = object ? upstream::router_model_field(b) : std::string();
    if ((!slot && !client_pinned && model.empty()) || brace == std::string::npos) {
        out.before = body;
        return out;
    }
    if (client_pinned) {
        nlohmann::json copy = *parsed;
        if (slot)
            copy["id_slot"] = *slot;
        else
            copy.erase("id_slot");
        if (!model.empty() && !copy.contains("model")) copy["model"] = b.router_model;
        out.owned = copy.dump();
        return out;
    }
    const auto next = body.find_first_not_of(" \t\r\n", brace + 1);
    const bool empty_object = next != std::string::npos && body[next] == '}';
    out.before = std::string_view(body).substr(0, brace + 1);
    out.field = slot ? fmt::format("\"id_slot\":{}", *slot) : "";
    if (!model.empty()) out.field += (out.field.empty() ? "" : ",") + model;
    if (!empty_object) out.field += ",";
    out.after = std::string_view(body).substr(brace + 1);
    return out;
}

std::string upstream_head(const http::request<http::string_body>& in, const config::backend& b,
                          std::size_t body_size) {
    std::string head;
    head.reserve(512);
    head.append(std::string_view(in.method_string())).append(" ");
    // A read names a router's model in its query (a write, in its body: prepared_body).
    if (in.method() == http::verb::get)
        head.append(upstream::router_target(b, std::string(in.target()), false));
    else
        head.append(std::string_view(in.target()));
    head.append(" HTTP/1.1\r\n");
    for (const auto& field : in) {
        const std::string_view name(field.name_string());
        if (!api::forward_request_header(name)) continue;
        head.append(name).append(": ").append(std::string_view(field.value())).append("\r\n");
    }
    head.append("Host: ").append(upstream::host_header(b.host, b.port)).append("\r\n");
    if (const auto key = b.current_child_key(); !key.empty())  // its process takes only this one
        head.append("Authorization: Bearer ").append(key).append("\r\n");
    const auto m = in.method();
    if (body_size > 0 || m == http::verb::options || m == http::verb::put ||
        m == http::verb::post) {
        head.append("Content-Length: ").append(std::to_string(body_size)).append("\r\n");
    }
    head.append("\r\n");
    return head;
}

}  // namespace warmslot::service
