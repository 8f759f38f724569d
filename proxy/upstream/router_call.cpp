#include "upstream/router_call.hpp"

#include <nlohmann/json.hpp>

namespace warmslot::upstream {
namespace {

std::string percent_encoded(std::string_view text) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : text) {
        const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
        if (plain) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 15]);
        }
    }
    return out;
}

bool has_param(std::string_view target, std::string_view name) {
    const auto q = target.find('?');
    if (q == std::string_view::npos) return false;
    auto at = q + 1;
    while (at < target.size()) {
        auto end = target.find('&', at);
        if (end == std::string_view::npos) end = target.size();
        const auto param = target.substr(at, end - at);
        if (param.starts_with(name) && (param.size() == name.size() || param[name.size()] == '='))
            return true;
        at = end + 1;
    }
    return false;
}

}  // namespace

bool keeps_unloaded(bool get, std::string_view target) {
    if (get) return true;
    if (!target.starts_with("/slots/")) return false;
    return target.find("action=save") != std::string_view::npos ||
           target.find("action=erase") != std::string_view::npos;
}

std::string router_target(const config::backend& b, std::string target, bool no_load) {
    if (b.router_model.empty()) return target;
    const auto add = [&](std::string_view param) {
        target.push_back(target.find('?') == std::string::npos ? '?' : '&');
        target.append(param);
    };
    if (!has_param(target, "model")) add("model=" + percent_encoded(b.router_model));
    if (no_load && !has_param(target, "autoload")) add("autoload=false");
    return target;
}

std::string router_model_field(const config::backend& b) {
    if (b.router_model.empty()) return "";
    return "\"model\":" + nlohmann::json(b.router_model).dump();
}

std::string router_body(const config::backend& b, std::string body) {
    if (b.router_model.empty()) return body;
    const auto field = router_model_field(b);
    const auto brace = body.find('{');
    if (brace == std::string::npos) return "{" + field + "}";
    const auto next = body.find_first_not_of(" \t\r\n", brace + 1);
    const bool empty_object = next != std::string::npos && body[next] == '}';
    body.insert(brace + 1, empty_object ? field : field + ",");
    return body;
}

std::optional<std::string> read_router_state(std::string_view answer, const std::string& model) {
    const auto list = nlohmann::json::parse(answer, nullptr, false);
    if (!list.is_object()) return std::nullopt;
    const auto data = list.find("data");
    if (data == list.end() || !data->is_array()) return std::nullopt;
    for (const auto& m : *data) {
        if (!m.is_object()) continue;
        const auto id = m.find("id");
        if (id == m.end() || !id->is_string() || id->get_ref<const std::string&>() != model)
            continue;
        const auto status = m.find("status");
        if (status == m.end() || !status->is_object()) return "";
        const auto value = status->find("value");
        return value != status->end() && value->is_string() ? value->get<std::string>() : "";
    }
    return "";
}

}  // namespace warmslot::upstream
