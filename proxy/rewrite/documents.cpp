#include "rewrite/documents.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "rewrite/text.hpp"

namespace warmslot::rewrite::detail {
namespace {

using nlohmann::json;

// Bodies come from the wire (valid UTF-8); a body built in code may not be, and must not throw.
std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_text_part(const json& part) {
    return part.is_object() && part.contains("type") && part["type"] == "text" &&
           part.contains("text") && part["text"].is_string();
}

std::string role_of(const json& m) {
    return m.is_object() && m.contains("role") && m["role"].is_string()
               ? m["role"].get<std::string>()
               : "";
}

const std::string* string_content(const json& m) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) return nullptr;
    return &m["content"].get_ref<const std::string&>();
}

// One document as found, then as it will be sent.
struct unit {
    std::string text;  // as sent: the client's text, or the cached original of a revision
    std::uint64_t hash = 0;
};

// Rewrites each document's text: a revision of a remembered one becomes that original (and a
// note), when the rules say so.
class editor {
  public:
    editor(const compiled_rules& r, const memory& m, document_outcome& out, bool allowed)
        : r_(r), m_(m), out_(out), allowed_(allowed && r.edits_enabled()) {}

    unit process(std::string text) {
        unit u{std::move(text), 0};
        u.hash = hash_text(u.text);
        if (!allowed_ || m_.knows(u.hash)) return u;
        auto original = find_original(u.text);
        if (!original || original->hash == u.hash) return u;
        auto note =
            revision_note(original->text, u.text,
                          "the document that begins \"" + excerpt(original->text, 80) + "\"",
                          r_.settings.max_note_bytes);
        if (!note) return u;
        out_.notes.push_back(std::move(*note));
        ++out_.edits;
        return unit{original->text, original->hash};
    }

    std::string id_of(const std::string& text) const {
        if (!r_.edit_id) return "";
        return r_.edit_id->first_group(std::string_view(text).substr(0, utf8_floor(text, 1024)));
    }

  private:
    std::shared_ptr<const stored_document> find_original(const std::string& text) const {
        if (const auto id = id_of(text); !id.empty()) {
            if (auto by_id = m_.by_id(id)) return by_id;
        }
        return m_.most_similar(content_chunks(text), text.size(), r_.settings.edit_similarity);
    }

    const compiled_rules& r_;
    const memory& m_;
    document_outcome& out_;
    bool allowed_;
};

// Per group of documents: edit each, then put them in cached order; records what was sent.
class group_writer {
  public:
    group_writer(const compiled_rules& r, const memory& m, memory_update& u, document_outcome& out,
                 bool edits_allowed)
        : r_(r), m_(m), u_(u), out_(out), edit_(r, m, out, edits_allowed) {}

    // Returns the texts to send, in sending order, and the permutation applied.
    std::vector<std::size_t> run(std::uint64_t key, std::vector<unit>& units) {
        std::vector<std::uint64_t> hashes;
        for (const auto& x : units) hashes.push_back(x.hash);
        std::vector<std::size_t> order(units.size());
        std::iota(order.begin(), order.end(), 0);
        if (r_.settings.document_order && units.size() > 1) {
            if (const auto cached = m_.order(key)) order = cached_first(hashes, *cached);
            if (!std::is_sorted(order.begin(), order.end())) ++out_.reordered_groups;
        }
        std::vector<std::uint64_t> sent;
        for (const auto i : order) {
            sent.push_back(units[i].hash);
            u_.documents.push_back({units[i].text, edit_.id_of(units[i].text)});
        }
        u_.orders.emplace_back(key, std::move(sent));
        return order;
    }
    unit edit(std::string text) { return edit_.process(std::move(text)); }

  private:
    const compiled_rules& r_;
    const memory& m_;
    memory_update& u_;
    document_outcome& out_;
    editor edit_;
};

enum class group_kind : std::uint64_t { messages = 1, parts, spans };

std::uint64_t group_key(std::uint64_t prefix, const std::string& role, group_kind kind,
                        std::uint64_t inner) {
    std::uint64_t k = hash_combine(prefix, hash_text(role));
    k = hash_combine(k, static_cast<std::uint64_t>(kind));
    return hash_combine(k, inner);
}

// Delimited documents inside one text; true when there were any.
bool rewrite_spans(std::string& text, std::uint64_t prefix, const std::string& role,
                   std::uint64_t inner, group_writer& w, const compiled_rules& r) {
    const auto spans = delimited_spans(text, r.delimiters);
    if (spans.empty()) return false;
    std::string out = text.substr(0, spans.front().first);
    std::size_t i = 0;
    while (i < spans.size()) {
        // A group: spans separated by white space only.
        std::size_t j = i + 1;
        while (j < spans.size() &&
               text.find_first_not_of(" \t\r\n", spans[j - 1].second) >= spans[j].first) {
            ++j;
        }
        std::vector<unit> units;
        for (std::size_t k = i; k < j; ++k) {
            units.push_back(w.edit(text.substr(spans[k].first, spans[k].second - spans[k].first)));
        }
        const auto key =
            group_key(prefix, role, group_kind::spans, hash_combine(inner, hash_text(out)));
        const auto order = w.run(key, units);
        for (std::size_t k = i; k < j; ++k) {
            out += units[order[k - i]].text;
            const auto next = k + 1 < spans.size() ? spans[k + 1].first : text.size();
            out += text.substr(spans[k].second, next - spans[k].second);
        }
        i = j;
    }
    text = std::move(out);
    return true;
}

// Text parts at least min_bytes long in an array content, or delimited documents inside parts.
void rewrite_parts(json& parts, std::uint64_t prefix, const std::string& role, group_writer& w,
                   const compiled_rules& r) {
    std::uint64_t inner = 0;
    for (std::size_t i = 0; i < parts.size();) {
        auto& part = parts[i];
        if (!is_text_part(part)) {
            inner = hash_combine(inner, hash_text(dump(part)));
            ++i;
            continue;
        }
        auto& text = part["text"].get_ref<std::string&>();
        if (rewrite_spans(text, prefix, role, hash_combine(inner, i), w, r) ||
            text.size() < r.settings.document_min_bytes) {
            inner = hash_combine(inner, hash_text(dump(part)));
            ++i;
            continue;
        }
        std::size_t j = i;
        std::vector<unit> units;
        while (
            j < parts.size() && is_text_part(parts[j]) &&
            parts[j]["text"].get_ref<const std::string&>().size() >=
                r.settings.document_min_bytes &&
            delimited_spans(parts[j]["text"].get_ref<const std::string&>(), r.delimiters).empty()) {
            units.push_back(w.edit(parts[j]["text"].get<std::string>()));
            ++j;
        }
        const auto order = w.run(group_key(prefix, role, group_kind::parts, inner), units);
        std::vector<json> moved;
        for (std::size_t k = 0; k < order.size(); ++k) {
            json p = parts[i + order[k]];
            p["text"] = units[order[k]].text;
            moved.push_back(std::move(p));
        }
        for (std::size_t k = 0; k < moved.size(); ++k) {
            inner = hash_combine(inner, hash_text(dump(moved[k])));
            parts[i + k] = std::move(moved[k]);
        }
        i = j;
    }
}

bool message_document(const json& m, const compiled_rules& r) {
    const auto* text = string_content(m);
    return text && text->size() >= r.settings.document_min_bytes &&
           delimited_spans(*text, r.delimiters).empty();
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> delimited_spans(
    const std::string& text, const std::vector<compiled_delimiter>& delimiters) {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const auto& d : delimiters) {
        std::size_t pos = 0;
        while (pos < text.size()) {
            const auto begin = d.begin.find(text, pos);
            if (!begin) break;
            const auto end = d.end.find(text, begin->second);
            if (!end) break;
            out.emplace_back(begin->first, end->second);
            pos = std::max(end->second, begin->first + 1);
        }
        if (!out.empty()) break;  // the first delimiter pair that finds documents wins
    }
    return out;
}

std::vector<std::size_t> cached_first(const std::vector<std::uint64_t>& hashes,
                                      const std::vector<std::uint64_t>& cached) {
    std::vector<std::size_t> order(hashes.size());
    std::iota(order.begin(), order.end(), 0);
    const auto rank = [&](std::size_t i) {
        const auto it = std::find(cached.begin(), cached.end(), hashes[i]);
        return it == cached.end() ? cached.size() + i
                                  : static_cast<std::size_t>(it - cached.begin());
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return rank(a) < rank(b); });
    return order;
}

document_outcome rewrite_documents(json& messages, const compiled_rules& rules, const memory& mem,
                                   memory_update& update, bool edits_allowed) {
    document_outcome out;
    group_writer w(rules, mem, update, out, edits_allowed);
    std::uint64_t prefix = 0;
    for (std::size_t i = 0; i < messages.size();) {
        auto& m = messages[i];
        const std::string role = role_of(m);
        if (message_document(m, rules)) {
            std::size_t j = i;
            std::vector<unit> units;
            while (j < messages.size() && role_of(messages[j]) == role &&
                   message_document(messages[j], rules)) {
                units.push_back(w.edit(*string_content(messages[j])));
                ++j;
            }
            const auto order = w.run(group_key(prefix, role, group_kind::messages, 0), units);
            std::vector<json> moved;
            for (const auto k : order) {
                json copy = messages[i + k];
                copy["content"] = units[k].text;
                moved.push_back(std::move(copy));
            }
            for (std::size_t k = 0; k < moved.size(); ++k) {
                prefix = hash_combine(prefix, hash_text(dump(moved[k])));
                messages[i + k] = std::move(moved[k]);
            }
            i = j;
            continue;
        }
        if (m.is_object() && m.contains("content")) {
            auto& content = m["content"];
            if (content.is_string()) {
                rewrite_spans(content.get_ref<std::string&>(), prefix, role, 0, w, rules);
            } else if (content.is_array()) {
                rewrite_parts(content, prefix, role, w, rules);
            }
        }
        prefix = hash_combine(prefix, hash_text(dump(m)));
        ++i;
    }
    return out;
}

}  // namespace warmslot::rewrite::detail
