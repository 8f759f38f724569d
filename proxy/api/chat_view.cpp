// Conversions written after llama-server's own (tools/server/server-chat.cpp), for the fields
// that reach the rendered prompt. Where llama-server throws, the view is std::nullopt.
#include "api/chat_view.hpp"

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace warmslot::api {
namespace {

using nlohmann::json;

struct refused : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// llama-server's json_value: the field if it has the wanted type, else the default.
std::string str(const json& j, const char* key) {
    if (!j.is_object()) return {};
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
json field(const json& j, const char* key, json fallback) {
    if (!j.is_object()) return fallback;
    const auto it = j.find(key);
    return it != j.end() && !it->is_null() ? *it : fallback;
}
bool has_string(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j.at(key).is_string();
}
bool has_array(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j.at(key).is_array();
}

// ---- Anthropic Messages ----

json image_part(const json& source) {
    const std::string type = str(source, "type");
    std::string url;
    if (type == "base64") {
        std::string media = str(source, "media_type");
        if (media.empty()) media = "image/jpeg";
        url = "data:" + media + ";base64," + str(source, "data");
    } else if (type == "url") {
        url = str(source, "url");
    } else {
        return nullptr;
    }
    return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

json tool_result(const json& block) {
    const std::string id = str(block, "tool_use_id");
    const json content = field(block, "content", nullptr);
    json msg = {{"role", "tool"}, {"tool_call_id", id}, {"content", ""}};
    if (content.is_string()) {
        msg["content"] = content;
    } else if (content.is_array()) {
        std::string text;
        json parts = json::array();
        bool images = false;
        for (const auto& c : content) {
            const std::string type = str(c, "type");
            if (type == "text") {
                text += str(c, "text");
                parts.push_back({{"type", "text"}, {"text", str(c, "text")}});
            } else if (type == "image") {
                images = true;
                if (json part = image_part(field(c, "source", json::object())); !part.is_null()) {
                    parts.push_back(std::move(part));
                }
            }
        }
        msg["content"] = images ? parts : json(text);
    }
    return msg;
}

void convert_message(const json& msg, json& out) {
    const std::string role = str(msg, "role");
    if (!msg.is_object() || !msg.contains("content")) {
        if (role != "assistant") out.push_back(msg);
        return;
    }
    const json& content = msg.at("content");
    if (!content.is_array()) {
        out.push_back(msg);
        return;
    }
    json parts = json::array(), tool_calls = json::array(), results = json::array();
    std::string reasoning;
    for (const auto& block : content) {
        const std::string type = str(block, "type");
        if (type == "text") {
            parts.push_back(block);
        } else if (type == "thinking") {
            reasoning += str(block, "thinking");
        } else if (type == "image") {
            if (json part = image_part(field(block, "source", json::object())); !part.is_null()) {
                parts.push_back(std::move(part));
            }
        } else if (type == "tool_use") {
            tool_calls.push_back({{"id", str(block, "id")},
                                  {"type", "function"},
                                  {"function",
                                   {{"name", str(block, "name")},
                                    {"arguments", field(block, "input", json::object()).dump()}}}});
        } else if (type == "tool_result") {
            results.push_back(tool_result(block));
        }
    }
    if (!parts.empty() || !tool_calls.empty() || !reasoning.empty()) {
        json m = {{"role", role}};
        m["content"] = parts.empty() ? json("") : parts;
        if (!tool_calls.empty()) m["tool_calls"] = tool_calls;
        if (!reasoning.empty()) m["reasoning_content"] = reasoning;
        out.push_back(std::move(m));
    }
    for (auto& r : results) out.push_back(std::move(r));
}

bool marked(const json& j) { return j.is_object() && j.contains("cache_control"); }

bool any_marked(const json& content) {
    if (!content.is_array()) return false;
    for (const auto& block : content) {
        if (marked(block)) return true;
    }
    return false;
}

// The index of the last user message: the final user turn, whose breakpoints do not count.
std::size_t final_user(const json& messages) {
    std::size_t last = messages.size();
    for (std::size_t i = 0; i < messages.size(); ++i) {
        if (str(messages[i], "role") == "user") last = i;
    }
    return last;
}

json from_messages(const json& body, std::optional<std::size_t>& breakpoint) {
    json messages = json::array();
    const json system = field(body, "system", nullptr);
    if (!system.is_null()) {
        if (any_marked(system)) breakpoint = 1;
        std::string text;
        if (system.is_string()) {
            text = system.get<std::string>();
            normalize_billing_header(text);
        } else if (system.is_array()) {
            for (const auto& block : system) {
                if (str(block, "type") != "text") continue;
                std::string t = str(block, "text");
                normalize_billing_header(t);
                text += t;
            }
        }
        messages.push_back({{"role", "system"}, {"content", text}});
    }
    if (!body.contains("messages")) throw refused("'messages' is required");
    if (const json& list = body.at("messages"); list.is_array()) {
        const std::size_t last_user = final_user(list);
        for (std::size_t i = 0; i < list.size(); ++i) {
            convert_message(list[i], messages);
            const bool mark =
                marked(list[i]) || (list[i].is_object() && list[i].contains("content") &&
                                    any_marked(list[i].at("content")));
            if (mark && i < last_user) breakpoint = messages.size();
        }
    }
    json view = {{"messages", std::move(messages)}};
    if (has_array(body, "tools")) {
        json tools = json::array();
        for (const auto& t : body.at("tools")) {
            tools.push_back({{"type", "function"},
                             {"function",
                              {{"name", str(t, "name")},
                               {"description", str(t, "description")},
                               {"parameters", field(t, "input_schema", json::object())}}}});
        }
        view["tools"] = std::move(tools);
    }
    if (body.contains("tool_choice") && body.at("tool_choice").is_object()) {
        const std::string type = str(body.at("tool_choice"), "type");
        if (type == "auto") view["tool_choice"] = "auto";
        if (type == "any" || type == "tool") view["tool_choice"] = "required";
    }
    if (body.contains("chat_template_kwargs"))
        view["chat_template_kwargs"] = body["chat_template_kwargs"];
    if (const json thinking = field(body, "thinking", json::object());
        str(thinking, "type") == "enabled") {
        view["thinking_budget_tokens"] = field(thinking, "budget_tokens", 10000);
    }
    return view;
}

// ---- OpenAI Responses ----

json input_content(const json& item) {
    json parts = json::array();
    for (const auto& part : item.at("content")) {
        const std::string type = str(part, "type");
        if (type == "input_text") {
            if (!part.contains("text")) throw refused("'Input text' requires 'text'");
            parts.push_back({{"text", part.at("text")}, {"type", "text"}});
        } else if (type == "input_image") {
            if (!part.contains("image_url")) throw refused("'image_url' is required");
            parts.push_back(
                {{"image_url", {{"url", part.at("image_url")}}}, {"type", "image_url"}});
        } else {
            throw refused("unsupported input content type");
        }
    }
    return parts;
}

json output_content(const json& item) {
    json parts = json::array();
    if (has_string(item, "content")) {
        parts.push_back({{"text", item.at("content")}, {"type", "text"}});
    } else if (has_array(item, "content")) {
        for (const auto& part : item.at("content")) {
            const std::string type = str(part, "type");
            if ((type == "output_text" || type == "input_text") && has_string(part, "text")) {
                parts.push_back({{"text", part.at("text")}, {"type", "text"}});
            } else if (type == "refusal" && has_string(part, "refusal")) {
                parts.push_back({{"refusal", part.at("refusal")}, {"type", "refusal"}});
            } else {
                throw refused("unsupported output content");
            }
        }
    }
    return parts;
}

void convert_item(json item, std::vector<json>& out) {
    if (!item.is_object()) throw refused("an input item is not an object");
    const bool merge = !out.empty() && str(out.back(), "role") == "assistant";
    const std::string role = str(item, "role"), type = str(item, "type");
    if (has_string(item, "content")) {
        item["content"] = json::array({{{"text", item.at("content")}, {"type", "input_text"}}});
    }
    if (has_array(item, "content") && (role == "user" || role == "system" || role == "developer")) {
        item["content"] = input_content(item);
        item.erase("type");
        item.erase("status");
        out.push_back(std::move(item));
    } else if (role == "assistant" && type == "message") {
        json parts = output_content(item);
        if (merge) {
            auto& prev = out.back();
            if (!has_array(prev, "content")) prev["content"] = json::array();
            for (auto& p : parts) prev["content"].push_back(std::move(p));
        } else {
            item.erase("status");
            item.erase("type");
            item["content"] = std::move(parts);
            out.push_back(std::move(item));
        }
    } else if (type == "function_call" && has_string(item, "arguments") &&
               has_string(item, "call_id") && has_string(item, "name")) {
        json call = {{"function", {{"arguments", item.at("arguments")}, {"name", item.at("name")}}},
                     {"id", item.at("call_id")},
                     {"type", "function"}};
        if (merge) {
            if (!has_array(out.back(), "tool_calls")) out.back()["tool_calls"] = json::array();
            out.back()["tool_calls"].push_back(std::move(call));
        } else {
            out.push_back({{"role", "assistant"}, {"tool_calls", json::array({std::move(call)})}});
        }
    } else if (type == "function_call_output" && has_string(item, "call_id") &&
               (has_string(item, "output") || has_array(item, "output"))) {
        json output = item.at("output");
        if (output.is_array()) {
            for (auto& o : output) {
                if (str(o, "type") != "input_text") throw refused("tool output must be input_text");
                o["type"] = "text";
            }
        }
        out.push_back({{"content", std::move(output)},
                       {"role", "tool"},
                       {"tool_call_id", item.at("call_id")}});
    } else if (type == "reasoning" && has_array(item, "summary")) {
        if (!has_array(item, "content") || item.at("content").empty() ||
            !has_string(item.at("content")[0], "text")) {
            throw refused("a reasoning item needs content text");
        }
        const json text = item.at("content")[0].at("text");
        if (merge)
            out.back()["reasoning_content"] = text;
        else
            out.push_back(
                {{"role", "assistant"}, {"content", json::array()}, {"reasoning_content", text}});
    } else {
        throw refused("cannot determine the type of an input item");
    }
}

json from_responses(const json& body) {
    if (!body.contains("input")) throw refused("'input' is required");
    if (!str(body, "previous_response_id").empty()) throw refused("previous_response_id");
    json view = body;
    view.erase("input");
    std::vector<json> messages;
    if (body.contains("instructions")) {
        messages.push_back({{"role", "system"}, {"content", str(body, "instructions")}});
        view.erase("instructions");
    }
    const json& input = body.at("input");
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
    } else if (input.is_array()) {
        for (const auto& item : input) convert_item(item, messages);
    } else {
        throw refused("'input' must be a string or an array");
    }
    view["messages"] = std::move(messages);
    if (body.contains("tools")) {
        if (!body.at("tools").is_array()) throw refused("'tools' must be an array");
        json tools = json::array();
        for (json tool : body.at("tools")) {
            if (str(tool, "type") != "function") continue;
            tool.erase("type");
            if (!tool.contains("strict")) tool["strict"] = true;
            tools.push_back({{"type", "function"}, {"function", std::move(tool)}});
        }
        view.erase("tools");
        if (!tools.empty()) view["tools"] = std::move(tools);
    }
    if (body.contains("reasoning")) {
        if (body.at("reasoning").is_object() && body.at("reasoning").contains("effort")) {
            view["reasoning_effort"] = body.at("reasoning").at("effort");
        }
        view.erase("reasoning");
    }
    view.erase("max_output_tokens");  // sampling: max_tokens for llama-server
    return view;
}

}  // namespace

void normalize_billing_header(std::string& text) {
    constexpr std::string_view prefix = "x-anthropic-billing-header:";
    if (!std::string_view(text).starts_with(prefix)) return;
    const auto at = text.find("cch=", prefix.size());
    constexpr std::size_t length = 5;
    if (at == std::string::npos) return;
    const auto from = at + 4;
    if (from + length < text.size() && text[from + length] == ';') {
        text.replace(from, length, length, 'f');
    }
}

std::optional<chat_view> to_chat_view(api_shape shape, const json& body) {
    if (!body.is_object()) return std::nullopt;
    try {
        chat_view view;
        if (shape == api_shape::messages)
            view.body = from_messages(body, view.breakpoint);
        else if (shape == api_shape::responses)
            view.body = from_responses(body);
        else
            return std::nullopt;
        if (body.contains("model")) view.body["model"] = body.at("model");
        return view;
    } catch (const std::exception&) {  // refused, or a wrongly typed field (json::type_error)
        return std::nullopt;
    }
}

}  // namespace warmslot::api
