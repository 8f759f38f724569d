// A request's prefixes as the disk tier sees them (the stable messages, a learned split point),
// its tokens, and prepare(): what a request planned on a slot needs done before it runs. See
// disk_tier.hpp; disk_miss.cpp holds what is done when the slot does not hold the prefix.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

using nlohmann::json;

// Whether text of `bytes` bytes may render to `tokens` tokens or more. A token holds at least one
// byte of the text; the chat template adds its own (role headers, special tokens, a default
// system prompt), bounded here by template_tokens. Never says no to a prompt that has enough
// tokens: a guessed rate (0.3 tokens per byte) would miss short prefixes of dense text.
constexpr std::uint64_t template_tokens = 512;
bool may_reach(std::uint64_t bytes, std::uint64_t tokens) {
    return bytes + template_tokens >= tokens;
}

}  // namespace

// The part before the final user turn, when it may be long enough to be worth a file.
std::optional<disk_tier::prefix> disk_tier::stable_prefix(const config::config& cfg, int backend,
                                                          const routing::fingerprint& fp,
                                                          const json& body) {
    const std::size_t stable = fp.stable_levels;
    if (stable == 0 || stable > fp.levels.size()) return std::nullopt;
    const auto info = reg_.info(backend);
    if (!info || info->identity.empty()) return std::nullopt;
    auto* idx = index_for(backend);
    if (idx == nullptr) return std::nullopt;
    // Whether it is long enough is decided on its exact tokens (place_tokens); its bytes only
    // rule out what cannot be (may_reach).
    if (!may_reach(fp.levels[stable - 1].bytes, cfg.cache.min_prefix_tokens)) {
        return std::nullopt;
    }
    prefix p;
    p.index = idx;
    p.levels.assign(fp.levels.begin(), fp.levels.begin() + static_cast<std::ptrdiff_t>(stable));
    const auto& messages = body["messages"];
    p.messages = json::array();
    for (std::size_t i = 0; i < stable; ++i) p.messages.push_back(messages[i]);
    p.body = &body;
    return p;
}

awaitable<bool> disk_tier::place_tokens(const request_scope& rq, int backend, prefix& p,
                                        const cache::token_chain& chain) {
    // The same messages (and what else reaches the template: their fingerprint) render the same
    // tokens: after the first time, their count is enough, and their tokens are the request's.
    const std::string memo = placed_key(backend, p);
    std::size_t n = 0;
    {
        std::lock_guard lock(mu_);
        if (const auto it = placed_.find(memo); it != placed_.end()) n = it->second;
    }
    if (n == 0 || n >= chain.size()) {
        const auto ids = co_await prefix_tokens(rq, backend, p.messages, *p.body, chain.tokens());
        if (!ids) co_return false;
        n = ids->size();
        remember_placed(memo, n);
    }
    p.key = chain.key_at(n);
    p.ids.assign(chain.tokens().begin(), chain.tokens().begin() + static_cast<std::ptrdiff_t>(n));
    co_return true;
}

std::optional<disk_tier::prefix> disk_tier::learned_prefix(const config::config& cfg, int backend,
                                                           const cache::token_chain& chain,
                                                           const json& body, cache::index* idx) {
    const auto info = reg_.info(backend);
    if (!info || idx == nullptr) return std::nullopt;
    std::size_t blocks = 0;
    std::vector<cache::split_points::made> made;
    const auto now = unix_now();
    {
        std::lock_guard lock(mu_);
        blocks =
            splits_.observe(info->identity, chain.blocks(), static_cast<std::uint64_t>(now), &made);
    }
    // Kept with the index, off the request's path: a restart of warmslot keeps what it learned.
    for (const auto& m : made) {
        net::post(index_ex_, [idx, row = cache::split_row{info->identity, m.hash, m.at, now}] {
            try {
                idx->put_split(row, cache::split_points::limits{}.points);
            } catch (const std::exception& e) {
                log()->warn("split point not kept: {}", e.what());
            }
        });
    }
    const std::size_t n = blocks * cache::token_block;
    if (n == 0 || n >= chain.size() || n < cfg.cache.min_prefix_tokens) {
        return std::nullopt;
    }
    prefix p;
    p.index = idx;
    p.key = chain.key_at(n);
    p.ids.assign(chain.tokens().begin(), chain.tokens().begin() + static_cast<std::ptrdiff_t>(n));
    p.messages = json::array();
    p.body = &body;
    return p;
}

awaitable<std::optional<cache::token_chain>> disk_tier::request_tokens(
    const request_scope& rq, int backend, const routing::fingerprint& fp, const json& body,
    const std::string& tenant) {
    if (!enabled_for(backend)) co_return std::nullopt;
    // The whole prompt holds every prefix a file could keep.
    if (!may_reach(fp.total_bytes, rq.cfg->cache.min_prefix_tokens)) co_return std::nullopt;
    try {
        co_return co_await chain_and_prefix(rq, backend, fp, body, tenant);
    } catch (const std::exception& e) {
        log()->warn("disk tier skipped for this request: {}", e.what());
    }
    co_return std::nullopt;
}

awaitable<disk_action> disk_tier::prepare(const request_scope& rq, routing::ticket& t,
                                          const routing::fingerprint& fp, const json& body,
                                          const cache::token_chain& chain, std::string tenant,
                                          bool save_after_answer) {
    disk_action none;
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return none;
    auto* idx = index_for(t.p.backend);
    auto msg = stable_prefix(*rq.cfg, t.p.backend, fp, body);
    const bool judged = !(body.contains("cache_prompt") && body["cache_prompt"] == false);
    // Nothing here fails the request: an index error (SQLITE_FULL on a full disk) only skips
    // the disk tier, and what the registry believes of the slot was set by each step as it went.
    try {
        // Files are named by the tokens they hold: the request's own tokens find them.
        if (msg) {
            msg->tenant = tenant;
            if (!co_await place_tokens(rq, t.p.backend, *msg, chain)) msg.reset();
        }
        auto learned = learned_prefix(*rq.cfg, t.p.backend, chain, body, idx);
        const auto slot_common = slot_common_blocks(t.p.backend, *t.p.slot, chain);
        // The request goes to its slot (a floating one may be moved to another by miss()).
        struct goes_there {
            disk_tier& tier;
            const routing::ticket& t;
            slot_prompt prompt;
            ~goes_there() {
                if (!t.p.slot) return;
                std::lock_guard lock(tier.mu_);
                tier.slot_blocks_[{t.p.backend, *t.p.slot}] = std::move(prompt);
            }
        } const there{*this, t, {chain.blocks(), fp.levels.empty() ? 0 : fp.levels.back().hash}};
        if (learned) learned->tenant = tenant;
        // The slot holds the stable messages, unless a file holds more of the request than the
        // slot shares with it (its conversation's own file, while the slot holds another
        // conversation on the same system prompt): then that file is restored, as on a miss.
        std::optional<std::uint64_t> longest;
        if (msg && t.p.matched_levels >= msg->levels.size() && restores_allowed(t.p.backend)) {
            longest = co_await longest_own_file(t.p.backend, idx, chain);
        }
        const std::size_t shared = slot_common ? *slot_common * cache::token_block
                                   : msg       ? msg->ids.size()
                                               : 0;
        if (msg && t.p.matched_levels >= msg->levels.size() &&
            (!longest || *longest <= shared + cache::token_block)) {
            remember(t.p.backend, *t.p.slot, *msg);
            disk_action a;
            if (t.p.matched_levels == msg->levels.size() && holds_more(t, *msg)) {
                a = co_await restore_or_keep(rq, t, *msg, judged);
            }
            if (save_after_answer) co_await conversation_due(*rq.cfg, t, chain, longest, tenant, a);
            co_return a;
        }
        co_return co_await miss(rq, t, std::move(msg), std::move(learned), chain, judged,
                                fp.floating, slot_common, save_after_answer && !fp.floating,
                                save_after_answer, tenant);
    } catch (const std::exception& e) {
        log()->warn("disk tier skipped for this request: {}", e.what());
        if (msg && !msg->key.empty()) remember(t.p.backend, *t.p.slot, *msg);
    }
    co_return none;
}

awaitable<std::uint64_t> disk_tier::longest_own_file(int backend, cache::index* idx,
                                                     const cache::token_chain& chain) {
    const auto info = reg_.info(backend);
    const auto identity = info ? info->identity : std::string();
    const auto own = co_await on_index(
        index_ex_, [idx, identity, &chain] { return idx->longest_prefix(identity, chain); });
    co_return own ? own->tokens : 0;
}

std::optional<std::size_t> disk_tier::slot_common_blocks(int backend, int slot,
                                                         const cache::token_chain& chain) const {
    std::lock_guard lock(mu_);
    const auto it = slot_blocks_.find({backend, slot});
    if (it == slot_blocks_.end()) return std::nullopt;
    return cache::common_blocks(it->second.blocks, chain.blocks());
}

}  // namespace warmslot::tier
