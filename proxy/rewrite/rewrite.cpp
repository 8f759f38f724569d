#include "rewrite/rewrite.hpp"

#include <algorithm>

#include "rewrite/documents.hpp"
#include "rewrite/text.hpp"

namespace warmslot::rewrite {
namespace {

using nlohmann::json;

std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

bool has_role(const json& m, std::string_view role) {
    return m.is_object() && m.contains("role") && m["role"].is_string() &&
           m["role"].get_ref<const std::string&>() == role;
}

bool is_system(const json& m) { return has_role(m, "system") || has_role(m, "developer"); }

// The texts of a message: its string content, or the text of each text part.
std::vector<std::string*> texts_of(json& m) {
    std::vector<std::string*> out;
    if (!m.is_object() || !m.contains("content")) return out;
    auto& content = m["content"];
    if (content.is_string()) out.push_back(&content.get_ref<std::string&>());
    if (!content.is_array()) return out;
    for (auto& part : content) {
        if (part.is_object() && part.contains("type") && part["type"] == "text" &&
            part.contains("text") && part["text"].is_string()) {
            out.push_back(&part["text"].get_ref<std::string&>());
        }
    }
    return out;
}

// Volatile lines of the leading system messages, taken out of them.
std::vector<std::string> take_volatile(json& messages, const compiled_rules& rules) {
    std::vector<std::string> taken;
    for (auto& m : messages) {
        if (!is_system(m)) break;
        for (std::string* text : texts_of(m))
            *text = take_volatile_lines(*text, rules.volatile_lines, taken);
    }
    return taken;
}

// Puts `block` at the start of a user message: before a string content (a blank line between
// them), or as a first text part.
void prepend(json& message, const std::string& block) {
    auto& content = message["content"];
    if (content.is_string()) {
        content = block + (block.ends_with('\n') ? "\n" : "\n\n") + content.get<std::string>();
    } else if (content.is_array()) {
        content.insert(content.begin(), json{{"type", "text"}, {"text", block}});
    } else {
        content = block;
    }
}

// A {"type": "text", "text": "..."} part.
bool is_text_part(const json& part) {
    return part.is_object() && part.contains("type") && part["type"] == "text" &&
           part.contains("text") && part["text"].is_string();
}

// A message's content as it identifies the message: without Anthropic cache_control markers,
// which a client moves to its newest message on every request, and one text part the same as
// that text as a string (Claude Code sends its late system message as a marked text block in
// its first request and as a plain string in the next ones).
std::string content_key(const json& content) {
    if (!content.is_array()) return dump(content);
    if (content.size() == 1 && is_text_part(content[0])) return dump(content[0]["text"]);
    json parts = content;
    for (auto& part : parts) {
        if (part.is_object()) part.erase("cache_control");
    }
    return dump(parts);
}

// Identifies a user turn across requests: the system prompt as sent, its position, its content
// as the client sent it.
std::uint64_t turn_key(std::uint64_t conversation, std::size_t index, const std::string& content) {
    return hash_combine(hash_combine(conversation, index), hash_text(content));
}

std::uint64_t conversation_key(const json& messages) {
    std::uint64_t k = hash_text("warmslot-turns-1");
    for (const auto& m : messages) {
        if (!is_system(m)) break;
        json unmarked = m;
        if (unmarked.contains("content")) unmarked["content"] = json(content_key(m["content"]));
        k = hash_combine(k, hash_text(dump(unmarked)));
    }
    return k;
}

// System (or developer) messages that come after the first other message move, in their order,
// to the end of the leading system messages. Returns how many moved.
std::size_t move_late_system(json& messages) {
    auto& list = messages.get_ref<json::array_t&>();
    const auto lead = std::find_if_not(list.begin(), list.end(), is_system);
    const auto late = static_cast<std::size_t>(std::count_if(lead, list.end(), is_system));
    if (late > 0) std::stable_partition(lead, list.end(), is_system);
    return late;
}

// The text of a message whose content is a string or text parts only; std::nullopt otherwise
// (an image part, ...).
std::optional<std::string> plain_text(const json& m) {
    if (!m.contains("content")) return std::nullopt;
    const auto& content = m["content"];
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return std::nullopt;
    std::string out;
    for (const auto& part : content) {
        if (!is_text_part(part)) return std::nullopt;
        out += part["text"].get_ref<const std::string&>();
    }
    return out;
}

// A Responses body's leading system and developer items become one message, their texts
// joined by a blank line (as its instructions and the items after them join): llama-server
// renders each as a system message of its own, and templates such as Qwen3.5's refuse a second
// one. Returns how many joined the first.
std::size_t merge_leading_system(json& messages) {
    std::vector<std::string> texts;
    for (const auto& m : messages) {
        if (!is_system(m)) break;
        auto text = plain_text(m);
        if (!text) break;
        texts.push_back(std::move(*text));
    }
    if (texts.size() < 2) return 0;
    std::string joined = texts[0];
    for (std::size_t i = 1; i < texts.size(); ++i) joined += "\n\n" + texts[i];
    messages[0]["content"] = std::move(joined);
    auto& list = messages.get_ref<json::array_t&>();
    list.erase(list.begin() + 1, list.begin() + static_cast<std::ptrdiff_t>(texts.size()));
    return texts.size() - 1;
}

}  // namespace

result rewrite_chat(const compiled_rules& rules, const memory& mem, const json& body) {
    result r{body, {}, {}};
    if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array()) return r;
    auto& messages = r.body["messages"];
    if (messages.empty()) return r;
    for (const auto& m : messages) {
        if (!m.is_object()) return r;
    }
    const std::size_t to_front = rules.system_to_front() ? move_late_system(messages) : 0;
    const std::size_t merged = rules.system_to_front() && body.contains(responses_marker)
                                   ? merge_leading_system(messages)
                                   : 0;
    // After the late system messages moved: a coding agent's first request ends with one (its
    // agent list after the question), and the question is then the final user turn.
    const bool final_user = has_role(messages.back(), "user");
    std::vector<std::string> moved;
    if (final_user && rules.volatile_enabled()) moved = take_volatile(messages, rules);
    // User turns as the client sent them: what identifies them in later requests.
    std::vector<std::string> client_content(messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) {
        if (has_role(messages[i], "user") && messages[i].contains("content")) {
            client_content[i] = content_key(messages[i]["content"]);
        }
    }
    detail::document_outcome docs;
    if (rules.documents_enabled()) {
        // Revision notes need a final user turn to go to.
        docs = detail::rewrite_documents(messages, rules, mem, r.update, final_user);
    }
    const auto conversation = conversation_key(messages);
    std::size_t restored = 0;
    std::vector<std::string> earlier;  // blocks given back to earlier turns
    for (std::size_t i = 0; i + 1 < messages.size(); ++i) {
        if (!has_role(messages[i], "user")) continue;
        if (auto note = mem.note(turn_key(conversation, i, client_content[i]))) {
            prepend(messages[i], *note);
            earlier.push_back(std::move(*note));
            ++restored;
        }
    }
    // A revision the conversation already told the model about is not told again.
    std::erase_if(docs.notes, [&](const std::string& note) {
        return std::any_of(earlier.begin(), earlier.end(),
                           [&](const std::string& e) { return e.find(note) != std::string::npos; });
    });
    // Lines an earlier turn of the conversation already carries are not told again: each new
    // turn would otherwise repeat them (a coding agent's every tool result), costing their
    // tokens once per request.
    const std::size_t taken = moved.size();
    std::erase_if(moved, [&](const std::string& line) {
        return std::any_of(earlier.begin(), earlier.end(),
                           [&](const std::string& e) { return e.find(line) != std::string::npos; });
    });
    const std::string block = turn_block(moved, docs.notes, rules.settings.volatile_mark);
    if (final_user && !block.empty()) {
        const std::size_t last = messages.size() - 1;
        prepend(messages[last], block);
        r.update.notes.emplace_back(turn_key(conversation, last, client_content[last]), block);
    }
    if (to_front > 0) r.applied.push_back("system_to_front=" + std::to_string(to_front));
    if (merged > 0) r.applied.push_back("system_merged=" + std::to_string(merged));
    if (taken > 0) r.applied.push_back("volatile_lines=" + std::to_string(taken));
    if (docs.reordered_groups > 0)
        r.applied.push_back("document_order=" + std::to_string(docs.reordered_groups));
    if (docs.edits > 0) r.applied.push_back("edits_append=" + std::to_string(docs.edits));
    if (restored > 0) r.applied.push_back("turn_notes=" + std::to_string(restored));
    return r;
}

memory& rewriter::memory_of(std::string_view tenant) const {
    std::lock_guard lock(mu_);
    auto it = memories_.find(tenant);
    if (it == memories_.end())
        it = memories_.emplace(std::string(tenant), std::make_unique<memory>(memory_bytes_)).first;
    return *it->second;
}

std::optional<result> rewriter::apply(std::string_view tenant, const json& body,
                                      std::string_view model) const {
    if (!active_.load()) return std::nullopt;  // the default: every rule off
    if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array())
        return std::nullopt;
    const auto book = rules();
    const auto* rules = book->for_model(model);
    if (rules == nullptr) return std::nullopt;
    return rewrite_chat(*rules, memory_of(tenant), body);
}

std::string describe(const std::vector<std::string>& applied) {
    if (applied.empty()) return "none";
    std::string out;
    for (const auto& a : applied) out += (out.empty() ? "" : ", ") + a;
    return out;
}

}  // namespace warmslot::rewrite
