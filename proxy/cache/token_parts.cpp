#include "cache/token_parts.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace warmslot::cache {

namespace {

constexpr std::size_t max_angle = 48;   // bytes of a `<...>` candidate, brackets included
constexpr std::size_t max_square = 24;  // and of a `[...]` one

bool angle_inside(unsigned char c) { return c > ' ' && c != '<' && c != '>' && c != 0x7f; }
bool square_inside(unsigned char c) {
    return std::isupper(c) || std::isdigit(c) || c == '_' || c == '/';
}

// The candidate that starts at text[i] ('<' or '['), or an empty view.
std::string_view candidate_at(std::string_view text, std::size_t i) {
    const bool angle = text[i] == '<';
    const char close = angle ? '>' : ']';
    const std::size_t limit = std::min(text.size(), i + (angle ? max_angle : max_square));
    for (std::size_t j = i + 1; j < limit; ++j) {
        const auto c = static_cast<unsigned char>(text[j]);
        if (c == static_cast<unsigned char>(close)) {
            if (j == i + 1) return {};
            return text.substr(i, j + 1 - i);
        }
        if (angle ? !angle_inside(c) : !square_inside(c)) return {};
    }
    return {};
}

}  // namespace

std::vector<std::string> marker_candidates(std::string_view text, std::size_t max) {
    std::vector<std::string> out;
    std::set<std::string_view> seen;
    for (std::size_t i = text.find_first_of("<["); i != std::string_view::npos && out.size() < max;
         i = text.find_first_of("<[", i + 1)) {
        const auto c = candidate_at(text, i);
        if (!c.empty() && seen.insert(c).second) out.emplace_back(c);
    }
    return out;
}

std::vector<std::size_t> part_starts(std::string_view text, const std::vector<std::string>& markers,
                                     std::size_t min_part) {
    std::vector<std::size_t> starts{0};
    if (markers.empty()) return starts;
    for (std::size_t i = text.find_first_of("<[", 1); i != std::string_view::npos;
         i = text.find_first_of("<[", i + 1)) {
        if (i - starts.back() < min_part) continue;
        const auto rest = text.substr(i);
        const bool at_marker = std::any_of(markers.begin(), markers.end(),
                                           [&](const auto& m) { return rest.starts_with(m); });
        if (at_marker) starts.push_back(i);
    }
    return starts;
}

bool is_special(const std::vector<int>& parsed, const std::vector<int>& plain) {
    return parsed.size() == 1 && parsed != plain;
}

token_parts::token_parts(std::size_t max_tokens) : max_tokens_(max_tokens) {}

std::vector<std::string> token_parts::unjudged(std::string_view text, std::size_t max) const {
    std::vector<std::string> out;
    if (judged_full()) return out;
    // Candidates are looked for in a bounded number of distinct texts: a hostile prompt full
    // of `<x1>`, `<x2>`, ... gets `max` of them judged, and at most max_judged per model ever.
    for (auto& c : marker_candidates(text, max_judged)) {
        if (out.size() >= max) break;
        if (!judged_.contains(c)) out.push_back(std::move(c));
    }
    return out;
}

void token_parts::judge(const std::string& candidate, bool special) {
    if (judged_full() || !judged_.insert(candidate).second) return;
    if (special) markers_.push_back(candidate);
}

void token_parts::set_start(std::vector<int> tokens) {
    if (tokens.size() > 1) broken_ = true;
    start_ = std::move(tokens);
}

token_parts::key token_parts::key_of(std::string_view part) {
    const auto h = XXH3_128bits(part.data(), part.size());
    return {h.low64, h.high64};
}

const std::vector<int>* token_parts::find(std::string_view part) {
    const auto it = entries_.find(key_of(part));
    if (it == entries_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.at);
    return &it->second.tokens;
}

void token_parts::remember(std::string_view part, std::vector<int> tokens) {
    if (tokens.size() > max_tokens_) return;
    const auto k = key_of(part);
    if (entries_.contains(k)) return;
    tokens_ += tokens.size();
    order_.push_front(k);
    entries_.emplace(k, entry{std::move(tokens), order_.begin()});
    while (tokens_ > max_tokens_ && !order_.empty()) {
        const auto it = entries_.find(order_.back());
        tokens_ -= it->second.tokens.size();
        entries_.erase(it);
        order_.pop_back();
    }
}

bool token_parts::check_due() {
    const auto n = uses_++;
    return n < 3 || n % 64 == 0;
}

void token_parts::checked(bool same) {
    if (same) return;
    broken_ = true;
    entries_.clear();
    order_.clear();
    tokens_ = 0;
}

}  // namespace warmslot::cache
