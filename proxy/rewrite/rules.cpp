#include "rewrite/rules.hpp"

#include <algorithm>

#include "api/chat_view.hpp"
#include "rewrite/text.hpp"

namespace warmslot::rewrite {
namespace {

std::optional<compiled_rules> compile_if_active(const config::rewrite_rules& r) {
    compiled_rules c(r);
    if (!c.any()) return std::nullopt;
    return c;
}

std::string_view without_break(std::string_view line) {
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
}

std::string joined(const std::vector<std::string_view>& lines, std::size_t from, std::size_t to) {
    std::string out;
    for (std::size_t i = from; i < to; ++i) out += lines[i];
    if (!out.empty() && out.back() != '\n') out += '\n';
    return out;
}

}  // namespace

compiled_rules::compiled_rules(const config::rewrite_rules& r) : settings(r) {
    for (const auto& name : r.volatile_presets) {
        if (const auto preset = config::volatile_preset(name)) {
            volatile_lines.emplace_back(*preset, true);
        }
    }
    for (const auto& p : r.volatile_patterns) volatile_lines.emplace_back(p);
    for (const auto& d : r.document_delimiters)
        delimiters.push_back({pattern(d.begin), pattern(d.end)});
    if (!r.edit_id.empty()) edit_id.emplace(r.edit_id);
}

rule_book::rule_book(const config::rewrite_settings& s) : defaults_(compile_if_active(s.defaults)) {
    for (const auto& [name, rules] : s.models) models_.emplace_back(name, compile_if_active(rules));
}

const compiled_rules* rule_book::for_model(std::string_view model) const {
    for (const auto& [name, rules] : models_) {
        if (name == model) return rules ? &*rules : nullptr;
    }
    return defaults_ ? &*defaults_ : nullptr;
}

bool rule_book::any() const {
    return defaults_ || std::any_of(models_.begin(), models_.end(),
                                    [](const auto& m) { return m.second.has_value(); });
}

std::string take_volatile_lines(std::string_view text, const std::vector<pattern>& rules,
                                std::vector<std::string>& taken) {
    std::string kept;
    kept.reserve(text.size());
    for (const auto line : split_lines(text)) {
        const auto bare = without_break(line);
        bool matches = false;
        if (!bare.empty() && bare.size() <= max_volatile_line_bytes) {
            for (const auto& rule : rules) {
                if (rule.found_in(bare)) {
                    matches = true;
                    break;
                }
            }
        }
        if (matches) {
            // llama-server blanks the per-request cch= hash of a billing line in the system
            // prompt, not in a user turn: moved, the line keeps what the model would have seen
            // (and one request's line is the next one's).
            std::string moved(bare);
            api::normalize_billing_header(moved);
            taken.push_back(std::move(moved));
        } else
            kept += line;
    }
    return kept;
}

std::optional<std::string> revision_note(std::string_view original, std::string_view now,
                                         std::string_view label, std::size_t max_bytes) {
    if (original == now) return std::nullopt;
    const auto a = split_lines(original);
    const auto b = split_lines(now);
    std::size_t head = 0;
    while (head < a.size() && head < b.size() && a[head] == b[head]) ++head;
    std::size_t tail = 0;
    while (tail < a.size() - head && tail < b.size() - head &&
           a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) {
        ++tail;
    }
    const std::size_t a_end = a.size() - tail;
    const std::size_t b_end = b.size() - tail;
    std::string note = "<revision>\nIn " + std::string(label) + ":\n";
    if (head == a_end) {
        note += "Insert after line " + std::to_string(head) + ":\n" + joined(b, head, b_end);
    } else {
        const std::string where =
            head + 1 == a_end ? "Line " + std::to_string(head + 1)
                              : "Lines " + std::to_string(head + 1) + "-" + std::to_string(a_end);
        note += where + " now read" + (head + 1 == a_end ? "s" : "") + ":\n";
        note += b_end > head ? joined(b, head, b_end) : "(deleted)\n";
        note += "instead of:\n" + joined(a, head, a_end);
    }
    note += "</revision>";
    if (note.size() > max_bytes) return std::nullopt;
    return note;
}

std::string turn_block(const std::vector<std::string>& volatile_lines,
                       const std::vector<std::string>& notes, bool mark) {
    std::string out;
    if (!volatile_lines.empty() && mark) {
        out += "<context moved-from=\"system prompt\">\n";
        for (const auto& line : volatile_lines) out += line + "\n";
        out += "</context>";
    } else {
        for (const auto& line : volatile_lines) out += line + "\n";
    }
    for (const auto& note : notes) {
        if (!out.empty() && out.back() != '\n') out += "\n";
        out += note;
    }
    return out;
}

}  // namespace warmslot::rewrite
