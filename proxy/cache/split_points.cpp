#include "cache/split_points.hpp"

#include <algorithm>

#include "cache/token_key.hpp"

namespace warmslot::cache {

std::size_t split_points::longest_passed(const std::string& identity,
                                         std::span<const std::uint64_t> blocks) const {
    const auto it = by_identity_.find(identity);
    if (it == by_identity_.end()) return 0;
    const auto& pts = it->second.points;
    for (std::size_t n = blocks.size(); n > 0; --n) {
        const auto p = pts.find(blocks[n - 1]);
        if (p != pts.end() && p->second.at == n) return n;
    }
    return 0;
}

void split_points::add(const std::string& identity, std::uint64_t hash, std::size_t at,
                       std::uint64_t now) {
    if (at == 0) return;
    auto& id = by_identity_[identity];
    auto& p = id.points[hash];
    p.at = at;
    p.last_passed = std::max(p.last_passed, now);
    trim(id);
}

std::size_t split_points::observe(const std::string& identity,
                                  std::span<const std::uint64_t> blocks, std::uint64_t now,
                                  std::vector<made>* made_now) {
    auto& id = by_identity_[identity];
    const std::size_t need = limits_.min_continuation_blocks;
    bool replaced = false;
    for (auto it = id.prompts.begin(); it != id.prompts.end();) {
        const std::size_t common = common_blocks(*it, blocks);
        if (common > 0 && it->size() >= common + need && blocks.size() >= common + need) {
            auto [at, fresh] = id.points.try_emplace(blocks[common - 1]);
            auto& p = at->second;
            if (made_now != nullptr && (fresh || p.at != common)) {
                made_now->push_back({blocks[common - 1], common});
            }
            p.at = common;
            p.last_passed = now;
        }
        // The new prompt extends this one (its next turn) or repeats it: it takes its place.
        if (common == it->size() && !replaced) {
            it = id.prompts.erase(it);
            replaced = true;
            continue;
        }
        ++it;
    }
    if (!blocks.empty()) id.prompts.emplace_front(blocks.begin(), blocks.end());
    // Every point passed now was used now.
    std::size_t longest = 0;
    for (std::size_t n = 1; n <= blocks.size(); ++n) {
        const auto p = id.points.find(blocks[n - 1]);
        if (p != id.points.end() && p->second.at == n) {
            p->second.last_passed = now;
            longest = n;
        }
    }
    trim(id);
    return longest;
}

std::size_t split_points::points(const std::string& identity) const {
    const auto it = by_identity_.find(identity);
    return it == by_identity_.end() ? 0 : it->second.points.size();
}

void split_points::trim(per_identity& id) const {
    while (id.prompts.size() > limits_.prompts) id.prompts.pop_back();
    while (id.points.size() > limits_.points) {
        auto oldest =
            std::min_element(id.points.begin(), id.points.end(), [](const auto& a, const auto& b) {
                return a.second.last_passed < b.second.last_passed;
            });
        id.points.erase(oldest);
    }
}

}  // namespace warmslot::cache
