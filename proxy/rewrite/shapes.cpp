// Anthropic Messages bodies under the chat rules: the top-level "system" is the leading system
// message while the rules run. Content blocks of type "text" are text parts in both APIs, so the
// rules read and edit them alike; tool_use, tool_result and image blocks are left as they are.
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
        if (b.is_object() && b.value("type", "") == "text" && b.contains("text") &&
            b["text"].is_string()) {
            b["text"] = "\n\n" + b["text"].get<std::string>();
            return;
        }
    }
}

}  // namespace

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
