#include "api/admin.hpp"

#include "api/json_parse.hpp"

namespace warmslot::api {

using nlohmann::json;

std::variant<warm_request, std::string> parse_warm_request(const json& body) {
    if (!body.is_object()) return std::string("request body must be a JSON object");
    for (const auto& [key, value] : body.items()) {
        if (key != "model" && key != "system" && key != "documents") {
            return "unknown field \"" + key + "\" (expected model, system, documents)";
        }
    }
    warm_request w;
    const auto model = body.find("model");
    if (model == body.end() || !model->is_string() ||
        model->get_ref<const std::string&>().empty()) {
        return std::string("\"model\" must be a non-empty string");
    }
    w.model = model->get<std::string>();
    if (const auto s = body.find("system"); s != body.end()) {
        if (!s->is_string()) return std::string("\"system\" must be a string");
        w.system = s->get<std::string>();
    }
    if (const auto d = body.find("documents"); d != body.end()) {
        if (!d->is_array()) return std::string("\"documents\" must be an array of strings");
        for (const auto& doc : *d) {
            if (!doc.is_string()) return std::string("\"documents\" must be an array of strings");
            w.documents.push_back(doc.get<std::string>());
        }
    }
    if (w.system.empty() && w.documents.empty()) {
        return std::string("nothing to warm: give \"system\" or \"documents\"");
    }
    return w;
}

json warm_chat_body(const warm_request& w, std::string_view question) {
    json messages = json::array();
    if (!w.system.empty()) messages.push_back({{"role", "system"}, {"content", w.system}});
    for (const auto& d : w.documents) messages.push_back({{"role", "user"}, {"content", d}});
    messages.push_back({{"role", "user"}, {"content", std::string(question)}});
    return {{"model", w.model}, {"messages", std::move(messages)}};
}

std::variant<std::optional<std::string>, std::string> parse_snapshot_request(
    std::string_view body) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        return std::optional<std::string>();
    }
    const json j = parse_json(body);
    if (j.is_discarded() || !j.is_object())
        return std::string("request body must be a JSON object");
    for (const auto& [key, value] : j.items()) {
        if (key != "backend") return "unknown field \"" + key + "\" (expected backend)";
    }
    const auto b = j.find("backend");
    if (b == j.end()) return std::optional<std::string>();
    if (!b->is_string()) return std::string("\"backend\" must be a string");
    return std::optional<std::string>(b->get<std::string>());
}

std::variant<warm_args, std::string> parse_warm_args(const std::vector<std::string>& args) {
    warm_args a;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& flag = args[i];
        if (flag == "--quiet" || flag == "--json") {
            (flag == "--quiet" ? a.quiet : a.json) = true;
            continue;
        }
        if (i + 1 >= args.size()) return flag + " needs a value";
        const auto& value = args[++i];
        if (flag == "--model")
            a.model = value;
        else if (flag == "--system")
            a.system_file = value;
        else if (flag == "--doc")
            a.doc_files.push_back(value);
        else if (flag == "--url")
            a.url = value;
        else if (flag == "--api-key-env")
            a.api_key_env = value;
        else
            return "unknown option " + flag;
    }
    if (a.model.empty()) return std::string("--model is required");
    if (a.system_file.empty() && a.doc_files.empty()) {
        return std::string("give --system FILE and/or --doc FILE");
    }
    return a;
}

}  // namespace warmslot::api
