// A prefix's file saved after the answer: on a full-attention model the request runs at once on
// its slot, and the slot, holding the prompt and the answer, is saved afterwards under the
// prefix's key. The client's first token comes as soon as it would straight from llama-server.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "routing/observations.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

bool disk_tier::leave_due(routing::ticket& t, const prefix& p, bool defer) {
    if (!defer || !t.p.slot || p.ids.empty()) return false;
    // Only a model known to cut its KV anywhere reuses the prefix of a longer file.
    const auto info = reg_.info(t.p.backend);
    if (!info || info->architecture.empty() ||
        routing::rolls_back_to_checkpoints_only(info->architecture)) {
        return false;
    }
    if (!saves_allowed(t.p.backend)) return false;
    auto due = std::make_shared<prefix>(p);
    due->body = nullptr;  // the request's body does not outlive the request
    due->messages = nlohmann::json();
    std::lock_guard lock(mu_);
    due_[{t.p.backend, *t.p.slot}] = std::move(due);
    return true;
}

awaitable<void> disk_tier::conversation_due(const config::config& cfg, routing::ticket& t,
                                            const cache::token_chain& chain,
                                            std::optional<std::uint64_t> have,
                                            const std::string& tenant, disk_action& a) {
    if (a.save_due > 0 || !cfg.cache.conversation_files || !t.p.slot) co_return;
    // The request's tokens to their last whole block: a key names whole blocks.
    const std::size_t n = chain.size() / cache::token_block * cache::token_block;
    if (n == 0 || n < cfg.cache.min_prefix_tokens) co_return;
    auto* idx = index_for(t.p.backend);
    const auto info = reg_.info(t.p.backend);
    if (idx == nullptr || !info || info->architecture.empty() ||
        routing::rolls_back_to_checkpoints_only(info->architecture)) {
        co_return;
    }
    if (!have) {
        const auto own = co_await on_index(index_ex_, [idx, identity = info->identity, &chain] {
            return idx->longest_prefix(identity, chain);
        });
        have = own ? own->tokens : 0;
    }
    const std::uint64_t step =
        std::max<std::uint64_t>({cfg.cache.min_prefix_tokens / 4, *have / 4, cache::token_block});
    if (n < *have + step) co_return;
    prefix p;
    p.index = idx;
    p.key = chain.key_at(n);
    p.ids.assign(chain.tokens().begin(), chain.tokens().begin() + static_cast<std::ptrdiff_t>(n));
    p.tenant = tenant;
    if (leave_due(t, p, true)) a.save_due = n;
}

awaitable<bool> disk_tier::wait_for_saves_of(const cache::token_chain& chain, std::uint64_t have,
                                             std::chrono::milliseconds limit) {
    const auto pending = [&] {
        std::lock_guard lock(mu_);
        return std::any_of(saving_after_.begin(), saving_after_.end(), [&](const auto& e) {
            return e.second > have && e.second < chain.size() && chain.key_at(e.second) == e.first;
        });
    };
    if (!pending()) co_return false;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    net::steady_timer timer(co_await net::this_coro::executor);
    // Bounded by the deadline; a save ends within one slot call's timeout.
    while (pending() && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(20));
        co_await timer.async_wait(nothrow);
    }
    co_return true;
}

void disk_tier::forget_due(int backend, int slot) {
    std::lock_guard lock(mu_);
    due_.erase({backend, slot});
}

awaitable<disk_action> disk_tier::save_after_answer(const request_scope& rq, routing::ticket& t,
                                                    disk_action a, std::uint64_t prompt_tokens,
                                                    std::uint64_t answer_tokens) {
    // Whatever happens, the result says only what was done: a save that did not happen is not
    // announced in the access line.
    const auto due_tokens = std::exchange(a.save_due, 0);
    if (!t.p.slot) co_return a;
    std::shared_ptr<const prefix> due;
    {
        std::lock_guard lock(mu_);
        if (auto it = due_.find({t.p.backend, *t.p.slot}); it != due_.end()) {
            due = std::move(it->second);
            due_.erase(it);
        }
    }
    if (!due || due_tokens == 0 || due->ids.size() != due_tokens) co_return a;
    // Shown to the next requests while it runs, however it ends.
    struct saving_mark {
        disk_tier& tier;
        std::string key;
        saving_mark(disk_tier& d, std::string k, std::uint64_t tokens)
            : tier(d), key(std::move(k)) {
            std::lock_guard lock(tier.mu_);
            tier.saving_after_[key] = tokens;
        }
        ~saving_mark() {
            std::lock_guard lock(tier.mu_);
            tier.saving_after_.erase(key);
        }
        saving_mark(const saving_mark&) = delete;
        saving_mark& operator=(const saving_mark&) = delete;
    } const mark(*this, due->key, due->ids.size());
    try {
        const auto& p = *due;
        upstream::slot_client llama(rq.pool, rq.cfg, t.p.backend);
        auto lease = leases_.take_exclusive(p.key);
        if (!lease) co_return a;  // another request is saving the same prefix
        auto* idx = p.index;
        const auto file = cache::file_name_for(p.key);
        if (co_await indexed_or_cleared(idx, p.key)) co_return a;
        // The slot must still hold this request's prompt and answer: idle, as many tokens as
        // they make (the last sampled token is not in the KV yet); an unpinned request from
        // elsewhere may have run there since.
        const auto holds_ours = [&](std::uint64_t n) {
            return n >= prompt_tokens &&
                   n <= prompt_tokens + std::max<std::uint64_t>(answer_tokens, 1);
        };
        const auto seen = co_await llama.slots();
        bool holds = false;
        if (seen.value && seen.value->is_array()) {
            for (const auto& s : *seen.value) {
                if (!s.is_object() || s.value("id", -1) != *t.p.slot) continue;
                holds = !s.value("is_processing", true) &&
                        holds_ours(s.value("n_prompt_tokens", std::uint64_t{0}));
            }
        }
        if (!holds) {
            log()->debug("no snapshot of {} after the answer: slot {} of {} holds another prompt",
                         p.key, *t.p.slot, llama.backend().name);
            co_return a;
        }
        cache::snapshot s;
        const bool ok = co_await save_file(rq, t, p, prompt_tokens, s);
        saved(t.p.backend, ok);
        if (!ok) co_return a;
        if (!holds_ours(s.tokens)) {
            log()->warn(
                "saving slot {} of {} after the answer wrote {} tokens where the prompt "
                "and answer have {} and {}: another task used the slot; no snapshot",
                *t.p.slot, llama.backend().name, s.tokens, prompt_tokens, answer_tokens);
            co_await on_index(index_ex_, [idx, key = p.key, file] {
                idx->drop(key);
                std::error_code ec;
                std::filesystem::remove(idx->slot_dir() / file, ec);
                return true;
            });
            co_return a;
        }
        // The row covers the prefix; the file holds more after it.
        const auto views = reg_.snapshot();
        s.tokens = p.ids.size();
        s.prefill_seconds =
            static_cast<double>(s.tokens) /
            std::max(1.0, views[static_cast<std::size_t>(t.p.backend)].prefill_tokens_per_second);
        const auto cfg = rq.cfg;
        co_await on_index(index_ex_, [this, idx, s, max_disk = cfg->cache.max_disk,
                                      own = cfg->cache.max_disk_of(s.tenant)] {
            idx->put(s);
            if (own) idx->enforce_tenant_budget(s.tenant, *own, leases_.held());
            idx->enforce_budget(max_disk, leases_.held());
            return true;
        });
        publish(rq.cfg, t.p.backend, s, idx->slot_dir() / s.file);
        a.after_answer = true;
        if (a.what == disk_action::kind::restored || a.what == disk_action::kind::snapshotted) {
            a.extended_to = s.tokens;
        } else {
            a.what = disk_action::kind::snapshotted;
            a.tokens = s.tokens;
            a.key = p.key;
        }
    } catch (const std::exception& e) {
        log()->warn("no snapshot after the answer: {}", e.what());
    }
    co_return a;
}

}  // namespace warmslot::tier
