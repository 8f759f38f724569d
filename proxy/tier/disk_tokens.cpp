// A request's prompt tokens as the chat endpoint makes them: rendered by /apply-template, then
// tokenized. A long prompt is tokenized by parts (cache/token_parts.hpp): cut before the special
// tokens its template puts between messages, each part's tokens remembered per model, so only
// what is new since earlier requests (usually the last turns) goes to /tokenize.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "api/prefix_cut.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

constexpr std::size_t min_parted_text = 4096;  // bytes: shorter prompts go whole, in one call
constexpr std::size_t min_part = 128;          // bytes of a part (cache::part_starts)
constexpr std::size_t judged_per_prompt = 16;  // candidate markers judged for one prompt
constexpr std::size_t max_models = 4;          // models whose parts are remembered

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// FNV-1a (64 bits) over the tokens' decimal texts, each followed by a comma: what the debug log
// shows of a prompt's tokens, simple to recompute anywhere (the integration tests do).
std::uint64_t fnv1a(const std::vector<int>& tokens) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    const auto add = [&h](char c) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ull;
    };
    for (const int t : tokens) {
        for (const char c : std::to_string(t)) add(c);
        add(',');
    }
    return h;
}

}  // namespace

// The request's tokens, with its stable messages' when their count is not remembered yet
// (chain_and_prefix), and how long naming it took (the debug line tests/bench/tokens.mjs reads).
awaitable<std::optional<cache::token_chain>> disk_tier::chain_and_prefix(
    const request_scope& rq, int backend, const routing::fingerprint& fp,
    const nlohmann::json& body, const std::string& tenant) {
    const auto t0 = std::chrono::steady_clock::now();
    auto msg = stable_prefix(*rq.cfg, backend, fp, body);
    if (msg) {
        const auto memo = placed_key(backend, *msg);
        std::lock_guard lock(mu_);
        if (placed_.contains(memo)) msg.reset();
    }
    auto chain = co_await request_chain(rq, backend, body, tenant, msg ? &*msg : nullptr);
    if (chain) log()->debug("request named by {} tokens in {:.2f} ms", chain->size(), since(t0));
    co_return chain;
}

// The request's prompt tokens. With `stable`, its stable messages are rendered at the same time
// as the request (llama-server answers the two on two of its HTTP threads), then both texts are
// tokenized in one go, so that the stable messages' parts are the request's (cache/token_parts);
// their count is remembered (placed_) when they are a prefix of the request's, and prepare()
// then finds it there (place_tokens) instead of rendering them after the request's own calls.
awaitable<std::optional<cache::token_chain>> disk_tier::request_chain(const request_scope& rq,
                                                                      int backend,
                                                                      const nlohmann::json& body,
                                                                      const std::string& tenant,
                                                                      const prefix* stable) {
    const auto info = reg_.info(backend);
    if (!info || info->identity.empty()) co_return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    nlohmann::json whole = body;
    whole.erase("stream");
    std::optional<std::string> text, stable_text;
    if (stable) {
        using namespace net::experimental::awaitable_operators;
        std::tie(text, stable_text) = co_await (rendered_text(rq, backend, whole) &&
                                                prefix_text(rq, backend, stable->messages, body));
    } else {
        text = co_await rendered_text(rq, backend, whole);
    }
    if (!text) co_return std::nullopt;
    const auto rendered = since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::string> texts{*text};
    if (stable_text) texts.push_back(std::move(*stable_text));
    auto all = co_await tokens_of_all(rq, backend, std::move(texts));
    auto& tokens = all.front();
    if (!tokens || tokens->empty()) co_return std::nullopt;
    log_prompt(*tokens, text->size(), rendered, since(t1));
    if (all.size() > 1 && all.back() && starts(*tokens, *all.back())) {
        remember_placed(placed_key(backend, *stable), all.back()->size());
    }
    co_return cache::token_chain(
        cache::key_scope(info->identity, rq.cfg->cache.isolated() ? &tenant : nullptr),
        std::move(*tokens));
}

std::string disk_tier::placed_key(int backend, const prefix& p) const {
    const auto info = reg_.info(backend);
    return fmt::format("{}\n{:016x}", info ? info->identity : std::string(), p.levels.back().hash);
}

void disk_tier::remember_placed(const std::string& memo, std::size_t tokens) {
    std::lock_guard lock(mu_);
    if (placed_.size() >= 4096) placed_.clear();  // bounded; refilled by the next requests
    placed_[memo] = tokens;
}

// Whether `part` is a proper, non-empty prefix of `full`.
bool disk_tier::starts(const std::vector<int>& full, const std::vector<int>& part) {
    return !part.empty() && part.size() < full.size() &&
           std::equal(part.begin(), part.end(), full.begin());
}

// Render the prefix and the whole request the way the chat endpoint does, and keep the prefix
// only when its tokens are a prefix of the request's tokens (a template may render a message
// differently once more follow it, and a tokenizer may merge across the cut).
awaitable<std::optional<std::vector<int>>> disk_tier::prefix_tokens(const request_scope& rq,
                                                                    int backend,
                                                                    const nlohmann::json& messages,
                                                                    const nlohmann::json& body,
                                                                    const std::vector<int>& full) {
    if (full.empty()) co_return std::nullopt;
    const auto text = co_await prefix_text(rq, backend, messages, body);
    if (!text) co_return std::nullopt;
    auto alone = co_await tokens_of(rq, backend, *text);
    if (!alone || !starts(full, *alone)) co_return std::nullopt;
    co_return alone;
}

// The text of `messages` rendered as the start of the chat body `body`, without a generation
// prompt. A template that cannot render them alone (Qwen3.5's refuses messages without a user
// query) renders them with stand-in user turns after them, and they are cut where the first of
// those begins, or a few tokens before (api/prefix_cut.hpp). Never later: a hybrid model then
// keeps the checkpoint llama-server makes where the request's last user message starts, which
// the next question on the same prefix rolls back to.
awaitable<std::optional<std::string>> disk_tier::prefix_text(const request_scope& rq, int backend,
                                                             const nlohmann::json& messages,
                                                             const nlohmann::json& body) {
    nlohmann::json part = body;
    part.erase("stream");
    part["messages"] = messages;
    part["add_generation_prompt"] = false;
    auto alone = co_await rendered_text(rq, backend, part);
    if (alone) co_return alone;
    // With one and with two stand-in user turns, both at once; the text before the first of
    // them (api::stable_text_end).
    const nlohmann::json turn = {{"role", "user"}, {"content", std::string(api::stand_in_marker)}};
    part["messages"].push_back(turn);
    nlohmann::json twice = part;
    twice["messages"].push_back(turn);
    using namespace net::experimental::awaitable_operators;
    const auto [one, two] =
        co_await (rendered_text(rq, backend, part) && rendered_text(rq, backend, twice));
    if (!one || !two) co_return std::nullopt;
    const auto end = api::stable_text_end(*one, *two);
    if (!end) co_return std::nullopt;
    co_return one->substr(0, *end);
}

// At debug: a prompt's token count, how long rendering and tokenizing it took, and a hash of its
// tokens (fnv1a above).
void disk_tier::log_prompt(const std::vector<int>& tokens, std::size_t bytes, double render_ms,
                           double tokenize_ms) {
    if (!log()->should_log(spdlog::level::debug)) return;
    log()->debug(
        "prompt tokens: {} from {} bytes, rendered in {:.2f} ms, tokenized in {:.2f} ms, "
        "fnv1a {:016x}",
        tokens.size(), bytes, render_ms, tokenize_ms, fnv1a(tokens));
}

// The prompt text /apply-template renders for a chat body; std::nullopt when it refuses.
awaitable<std::optional<std::string>> disk_tier::rendered_text(const request_scope& rq, int backend,
                                                               const nlohmann::json& body) {
    upstream::slot_client llama(rq.pool, rq.cfg, backend);
    co_return (co_await llama.apply_template(body)).value;
}

// `text` tokenized as the chat endpoint does: special tokens added and parsed.
awaitable<std::optional<std::vector<int>>> disk_tier::tokens_of(const request_scope& rq,
                                                                int backend, std::string text) {
    std::vector<std::string> one;
    one.push_back(std::move(text));
    auto all = co_await tokens_of_all(rq, backend, std::move(one));
    co_return std::move(all.front());
}

// Each of `texts` tokenized as the chat endpoint does: by parts when one of them is long, with
// one call for the parts none of them had before; else each whole.
awaitable<std::vector<std::optional<std::vector<int>>>> disk_tier::tokens_of_all(
    const request_scope& rq, int backend, std::vector<std::string> texts) {
    const auto info = reg_.info(backend);
    const bool long_text = std::any_of(texts.begin(), texts.end(), [](const std::string& t) {
        return t.size() >= min_parted_text;
    });
    if (info && !info->identity.empty() && long_text) {
        auto parted = co_await tokens_by_parts(rq, backend, info->identity, texts);
        if (parted) {
            std::vector<std::optional<std::vector<int>>> out;
            for (auto& t : *parted) out.emplace_back(std::move(t));
            co_return out;
        }
    }
    upstream::slot_client llama(rq.pool, rq.cfg, backend);
    std::vector<std::optional<std::vector<int>>> out;
    for (auto& t : texts) out.push_back((co_await llama.tokenize(std::move(t))).value);
    co_return out;
}

// The model's parts memory, made when missing (under mu_). Only a few models are remembered:
// another one replaces the first in the map.
cache::token_parts& disk_tier::parts_for(const std::string& identity) {
    auto it = parts_.find(identity);
    if (it != parts_.end()) return it->second;
    if (parts_.size() >= max_models) parts_.erase(parts_.begin());
    return parts_.try_emplace(identity).first->second;
}

// Judges the candidate markers of `text` not judged yet: one call with special tokens parsed,
// one without. False when llama-server did not answer both.
awaitable<bool> disk_tier::judge_markers(upstream::slot_client& llama, const std::string& identity,
                                         std::string_view text) {
    std::vector<std::string> candidates;
    {
        std::lock_guard lock(mu_);
        candidates = parts_for(identity).unjudged(text, judged_per_prompt);
    }
    if (candidates.empty()) co_return true;
    const auto parsed = co_await llama.tokenize_parts(candidates, false, true);
    if (!parsed.value) co_return false;
    const auto plain = co_await llama.tokenize_parts(candidates, false, false);
    if (!plain.value) co_return false;
    std::lock_guard lock(mu_);
    auto& parts = parts_for(identity);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        parts.judge(candidates[i], cache::is_special((*parsed.value)[i], (*plain.value)[i]));
    }
    co_return true;
}

// The tokens of `texts` put together from their parts': the prompt's start, then each part's
// tokens, remembered or tokenized now (every part no text had before, in one call). std::nullopt
// when parts are off for the model or a call failed (the caller then tokenizes each text whole).
// Now and then the first text is tokenized whole too and compared.
awaitable<std::optional<std::vector<std::vector<int>>>> disk_tier::tokens_by_parts(
    const request_scope& rq, int backend, std::string identity, std::vector<std::string> texts) {
    upstream::slot_client llama(rq.pool, rq.cfg, backend);
    bool need_start = false;
    {
        std::lock_guard lock(mu_);
        auto& memo = parts_for(identity);
        if (!memo.usable()) co_return std::nullopt;
        need_start = !memo.start();
    }
    if (need_start) {
        auto empty = co_await llama.tokenize("");
        if (!empty.value) co_return std::nullopt;
        std::lock_guard lock(mu_);
        parts_for(identity).set_start(std::move(*empty.value));
    }
    for (const auto& t : texts) {
        if (!co_await judge_markers(llama, identity, t)) co_return std::nullopt;
    }

    struct piece {
        std::string_view text;
        std::optional<std::vector<int>> tokens;  // remembered
        std::size_t fresh = 0;                   // else: its place in the call
    };
    std::vector<std::vector<piece>> pieces(texts.size());
    std::vector<std::string> fresh;
    std::map<std::string_view, std::size_t> fresh_at;
    std::vector<int> start;
    bool check = false;
    {
        std::lock_guard lock(mu_);
        auto& memo = parts_for(identity);
        if (!memo.usable() || !memo.start()) co_return std::nullopt;
        start = *memo.start();
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const std::string_view all(texts[i]);
            const auto at = cache::part_starts(all, memo.markers(), min_part);
            for (std::size_t k = 0; k < at.size(); ++k) {
                const auto end = k + 1 < at.size() ? at[k + 1] : all.size();
                piece p{all.substr(at[k], end - at[k]), std::nullopt, 0};
                if (const auto* known = memo.find(p.text)) {
                    p.tokens = *known;
                } else {
                    const auto [it, added] = fresh_at.try_emplace(p.text, fresh.size());
                    if (added) fresh.emplace_back(p.text);
                    p.fresh = it->second;
                }
                pieces[i].push_back(std::move(p));
            }
        }
        check = memo.check_due();
    }
    std::vector<std::vector<int>> got;
    if (!fresh.empty()) {
        auto r = co_await llama.tokenize_parts(fresh, false, true);
        if (!r.value) co_return std::nullopt;
        got = std::move(*r.value);
    }
    std::vector<std::vector<int>> out;
    for (const auto& text_pieces : pieces) {
        auto& t = out.emplace_back(start);
        for (const auto& p : text_pieces) {
            const auto& tk = p.tokens ? *p.tokens : got[p.fresh];
            t.insert(t.end(), tk.begin(), tk.end());
        }
    }
    log()->debug("{} prompt(s) of {} bytes tokenized by parts: {} parts, {} of them new",
                 texts.size(), texts.front().size(), pieces.front().size(), fresh.size());

    if (check) {
        auto whole = co_await llama.tokenize(texts.front());
        if (!whole.value) co_return std::nullopt;
        const bool same = *whole.value == out.front();
        std::lock_guard lock(mu_);
        parts_for(identity).checked(same);
        if (!same) {
            log()->warn(
                "backend {}: a prompt's tokens by parts differ from its whole "
                "tokenization ({} and {} tokens); prompts of this model are tokenized "
                "whole from now on",
                llama.backend().name, out.front().size(), whole.value->size());
            co_return std::nullopt;
        }
    }
    std::lock_guard lock(mu_);
    auto& memo = parts_for(identity);
    if (memo.usable()) {
        for (const auto& [text, at] : fresh_at) memo.remember(text, got[at]);
    }
    co_return out;
}

}  // namespace warmslot::tier
