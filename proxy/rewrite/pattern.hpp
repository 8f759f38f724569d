// One compiled regular expression of the rewrite rules, on RE2: matching takes time linear in
// the text and a bounded stack, whatever the pattern and the text (a client's message can be
// megabytes). RE2 syntax: no backreferences and no lookaround. Immutable; copies share the
// compiled form; safe to use from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace re2 {
class RE2;
}

namespace warmslot::rewrite {

class pattern {
  public:
    // Throws std::invalid_argument naming RE2's complaint when `text` does not compile (the
    // config checked it before, so this only happens with a pattern built in code).
    explicit pattern(std::string_view text, bool case_insensitive = false);

    // The first match that starts at or after `from`, as [begin, end) byte offsets in `text`.
    // `^` still means the start of `text`, not `from`.
    std::optional<std::pair<std::size_t, std::size_t>> find(std::string_view text,
                                                            std::size_t from = 0) const;
    bool found_in(std::string_view text) const { return find(text).has_value(); }
    // What the first capture group of the first match holds; "" when nothing matches.
    std::string first_group(std::string_view text) const;

  private:
    std::shared_ptr<const re2::RE2> re_;
};

}  // namespace warmslot::rewrite
