// The rewrite rules of one model, compiled once from the config, and the pure text rules:
// volatile lines and revision notes. Immutable after construction; safe to share.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "rewrite/pattern.hpp"

namespace warmslot::rewrite {

struct compiled_delimiter {
    pattern begin;
    pattern end;
};

struct compiled_rules {
    explicit compiled_rules(const config::rewrite_rules& r);

    config::rewrite_rules settings;
    std::vector<pattern> volatile_lines;  // the presets match case-insensitively
    std::vector<compiled_delimiter> delimiters;
    std::optional<pattern> edit_id;

    bool volatile_enabled() const { return !volatile_lines.empty(); }
    bool system_to_front() const { return settings.system_to_front; }
    bool edits_enabled() const { return settings.edits == config::edit_mode::append; }
    bool documents_enabled() const { return settings.document_order || edits_enabled(); }
    bool any() const { return system_to_front() || volatile_enabled() || documents_enabled(); }
};

// Rules per model, built from the `rewrite:` section. Immutable; safe to share.
class rule_book {
  public:
    explicit rule_book(const config::rewrite_settings& s);
    // The rules for a request's "model"; nullptr when no rule is on for it.
    const compiled_rules* for_model(std::string_view model) const;
    // Whether some model has a rule on.
    bool any() const;

  private:
    std::optional<compiled_rules> defaults_;
    std::vector<std::pair<std::string, std::optional<compiled_rules>>> models_;
};

// Lines longer than this are never volatile: a date inside a long paragraph is content.
inline constexpr std::size_t max_volatile_line_bytes = 512;

// Removes the lines that match any rule (each with its line break); appends them, without the
// break, to `taken`. Returns the text left.
std::string take_volatile_lines(std::string_view text, const std::vector<pattern>& rules,
                                std::vector<std::string>& taken);

// The revision note telling the model how `now` differs from `original` (one hunk: the lines
// between the common leading and trailing lines), `label` naming the document ("the document
// that begins ..."). std::nullopt when the texts are equal or the note would be longer than
// max_bytes.
std::optional<std::string> revision_note(std::string_view original, std::string_view now,
                                         std::string_view label, std::size_t max_bytes);

// The block put at the start of the final user turn. `mark`: the moved lines go inside
// `<context moved-from="system prompt">` ... `</context>`; without it they go as they are, one
// per line (each with its line break, so a text part after them starts on a line of its own).
std::string turn_block(const std::vector<std::string>& volatile_lines,
                       const std::vector<std::string>& notes, bool mark = true);

}  // namespace warmslot::rewrite
