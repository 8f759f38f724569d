#include "rewrite/pattern.hpp"

#include <re2/re2.h>

#include <stdexcept>

namespace warmslot::rewrite {
namespace {

RE2::Options options(bool case_insensitive) {
    RE2::Options o;
    o.set_log_errors(false);  // a bad pattern is reported by the caller, not on stderr
    o.set_case_sensitive(!case_insensitive);
    return o;
}

re2::StringPiece piece(std::string_view text) { return {text.data(), text.size()}; }

}  // namespace

pattern::pattern(std::string_view text, bool case_insensitive)
    : re_(std::make_shared<const RE2>(piece(text), options(case_insensitive))) {
    if (!re_->ok())
        throw std::invalid_argument("invalid regular expression \"" + std::string(text) +
                                    "\": " + re_->error());
}

std::optional<std::pair<std::size_t, std::size_t>> pattern::find(std::string_view text,
                                                                 std::size_t from) const {
    if (from > text.size()) return std::nullopt;
    re2::StringPiece m;
    if (!re_->Match(piece(text), from, text.size(), RE2::UNANCHORED, &m, 1)) return std::nullopt;
    const auto begin = static_cast<std::size_t>(m.data() - text.data());
    return std::make_pair(begin, begin + m.size());
}

std::string pattern::first_group(std::string_view text) const {
    if (re_->NumberOfCapturingGroups() < 1) return "";
    re2::StringPiece m[2];
    if (!re_->Match(piece(text), 0, text.size(), RE2::UNANCHORED, m, 2) || m[1].data() == nullptr)
        return "";
    return std::string(m[1].data(), m[1].size());
}

}  // namespace warmslot::rewrite
