// Anthropic Messages and OpenAI Responses bodies under the chat rules.
//
// Messages: the top-level "system" is the leading system message while the rules run. Content
// blocks of type "text" are text parts in both APIs, so the rules read and edit them alike;
// tool_use, tool_result and image blocks are left as they are.
//
// Responses: "instructions" is the leading system message, a string "input" the user message,
// and each input item with a role and a content is a message whose input_text/output_text parts
// are text parts while the rules run (their type is kept aside and given back). Other items
// (function calls, their outputs, reasoning) ride along untouched as messages of no role.
#include "rewrite/rewrite.hpp"

namespace warmslot::rewrite {
namespace {

using nlohmann::json;

bool is_system(const json& m) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return false;
    const auto& role = m["role"].get_ref<const std::string&>();
    return role == "system" || role == "developer";
}

// One system message as text blocks; `separate` starts it with a blank line, because
// A string field of an object, "" when it is absent or not a string: a client may send any JSON
// where a type or a role belongs (json::value would throw on a number there).
std::string string_field(const json& j, const char* key) {
    if (!j.is_object()) return "";
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// llama-server joins system blocks without a separator.
void append_blocks(const json& message, bool separate, json& blocks) {
    const json content = message.contains("content") ? message["content"] : json("");
    std::size_t first = blocks.size();
    if (content.is_string()) {
        blocks.push_back({{"type", "text"}, {"text", content}});
    } else if (content.is_array()) {
        for (const auto& b : content) blocks.push_back(b);
    }
    if (!separate) return;
    for (std::size_t i = first; i < blocks.size(); ++i) {
        auto& b = blocks[i];
        if (string_field(b, "type") == "text" && b.contains("text") && b["text"].is_string()) {
            b["text"] = "\n\n" + b["text"].get<std::string>();
            return;
        }
    }
}

constexpr const char* item_key = "x-warmslot-item";       // an item the rules do not read
constexpr const char* part_type_key = "x-warmslot-type";  // a text part's own type
constexpr const char* instructions_key = "x-warmslot-instructions";

std::string text_of(const json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string out;
    if (!content.is_array()) return out;
    for (const auto& p : content) {
        if (p.is_object() && p.contains("text") && p["text"].is_string())
            out += p["text"].get<std::string>();
    }
    return out;
}

json item_to_message(const json& item) {
    const std::string role = item.is_object() && item.contains("role") && item["role"].is_string()
                                 ? item["role"].get<std::string>()
                                 : std::string();
    const bool known =
        role == "user" || role == "system" || role == "developer" || role == "assistant";
    if (!known || !item.contains("content") ||
        !(item["content"].is_string() || item["content"].is_array())) {
        return {{item_key, item}};
    }
    json m = item;
    if (m["content"].is_array()) {
        for (auto& p : m["content"]) {
            const std::string type = string_field(p, "type");
            if (type != "input_text" && type != "output_text") continue;
            p[part_type_key] = type;
            p["type"] = "text";
        }
    }
    return m;
}

json message_to_item(json m) {
    if (m.contains(item_key)) return std::move(m[item_key]);
    const bool assistant = string_field(m, "role") == "assistant";
    if (m.contains("content") && m["content"].is_array()) {
        for (auto& p : m["content"]) {
            if (string_field(p, "type") != "text") continue;
            p["type"] = p.contains(part_type_key) ? p[part_type_key]
                                                  : json(assistant ? "output_text" : "input_text");
            p.erase(part_type_key);
        }
    }
    return m;
}

}  // namespace

json responses_to_chat(const json& body) {
    json chat = body;
    json messages = json::array();
    if (body.contains("instructions") && body["instructions"].is_string()) {
        messages.push_back(
            {{"role", "system"}, {"content", body["instructions"]}, {instructions_key, true}});
    }
    chat.erase("instructions");
    chat.erase("input");
    const json input = body.contains("input") ? body["input"] : json();
    if (input.is_string()) messages.push_back({{"role", "user"}, {"content", input}});
    if (input.is_array()) {
        for (const auto& item : input) messages.push_back(item_to_message(item));
    }
    chat["messages"] = std::move(messages);
    chat[responses_marker] = true;
    return chat;
}

json chat_to_responses(json chat, const json& original) {
    json list = std::move(chat["messages"]);
    chat.erase("messages");
    chat.erase(responses_marker);
    std::size_t at = 0;
    if (!list.empty() && list[0].is_object() && list[0].contains(instructions_key)) {
        // The instructions, with the system messages the rules put after them.
        std::string text;
        for (; at < list.size() && is_system(list[at]) && !list[at].contains(item_key); ++at) {
            text += (at == 0 ? "" : "\n\n") + text_of(list[at]["content"]);
        }
        chat["instructions"] = text;
    }
    const bool string_input = original.contains("input") && original["input"].is_string();
    if (string_input && at + 1 == list.size() && string_field(list[at], "role") == "user" &&
        list[at]["content"].is_string()) {
        chat["input"] = list[at]["content"];
        return chat;
    }
    json input = json::array();
    for (; at < list.size(); ++at) input.push_back(message_to_item(std::move(list[at])));
    chat["input"] = std::move(input);
    return chat;
}

json messages_to_chat(const json& body) {
    json chat = body;
    json messages = json::array();
    if (body.contains("system") && !body["system"].is_null()) {
        messages.push_back({{"role", "system"}, {"content", body["system"]}});
    }
    chat.erase("system");
    if (body.contains("messages") && body["messages"].is_array()) {
        for (const auto& m : body["messages"]) messages.push_back(m);
    }
    chat["messages"] = std::move(messages);
    return chat;
}

json chat_to_messages(json chat) {
    auto& list = chat["messages"];
    std::size_t lead = 0;
    while (lead < list.size() && is_system(list[lead])) ++lead;
    json body = std::move(chat);
    json messages = json::array();
    for (std::size_t i = lead; i < list.size(); ++i) messages.push_back(std::move(list[i]));
    if (lead == 1 && list[0].contains("content") && list[0]["content"].is_string()) {
        body["system"] = list[0]["content"];
    } else if (lead > 0) {
        json blocks = json::array();
        for (std::size_t i = 0; i < lead; ++i) append_blocks(list[i], i > 0, blocks);
        body["system"] = std::move(blocks);
    }
    body["messages"] = std::move(messages);
    return body;
}

}  // namespace warmslot::rewrite
