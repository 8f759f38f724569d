// Making a snapshot: prime the planned slot with exactly the prefix, save it, index it.
// The request that follows extends the primed slot, so a snapshot adds no prefill.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "api/timings.hpp"
#include "routing/observations.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"
#include "util/log.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

constexpr double default_bytes_per_token = 2048;  // before a save on the backend taught better

// What GET /slots shows about `slot`: whether it holds exactly `tokens` tokens, and how many
// prompt tokens its last task computed.
struct slot_seen {
    bool holds = false;
    std::uint64_t processed = 0;
};
awaitable<slot_seen> look_at_slot(upstream::slot_client& llama, int slot, std::size_t tokens) {
    const auto r = co_await llama.slots();
    slot_seen seen;
    if (!r.value) co_return seen;
    for (const auto& s : *r.value) {
        if (s.is_object() && s.value("id", -1) == slot) {
            seen.holds = s.value("n_prompt_tokens", std::size_t{0}) == tokens;
            seen.processed = s.value("n_prompt_tokens_processed", std::uint64_t{0});
        }
    }
    co_return seen;
}

// Removes what a failed save left of `file` in `dir` (llama-server writes the file in place),
// unless a row says the file is a finished one. Index thread.
void remove_unindexed(cache::index& idx, const std::string& key, const std::string& file) {
    if (idx.find(key)) return;
    std::error_code ec;
    std::filesystem::remove(idx.slot_dir() / file, ec);
}

}  // namespace

// A priming that computed the prefix from scratch on a hybrid or recurrent model left only its
// own context checkpoints in the slot, near the prefix's end (at n-4 and n-4-n_ubatch). On a hybrid
// model they would later push out the checkpoint llama-server makes where the request's last user
// message starts (one closer than --checkpoint-min-step to an earlier checkpoint is dropped), so
// the next question on the same prefix would roll back n_ubatch tokens further than without
// warmslot. Restoring the file just written leaves the slot holding exactly the prefix and no
// checkpoints (llama-server.md section 4), as a restore from disk does. A priming that extended
// what the slot held keeps its checkpoints: the earlier ones let another conversation on a shorter
// prefix roll back to it.
awaitable<void> disk_tier::drop_checkpoints(upstream::slot_client& llama, routing::ticket& t,
                                            std::string file, std::uint64_t tokens) {
    const routing::work_mark restoring(reg_, t.p.backend, *t.p.slot, routing::slot_work::restoring,
                                       tokens);
    const auto r = co_await llama.restore(*t.p.slot, file);
    if (!r.value || r.value->tokens != tokens) {
        // A failed restore wipes the slot: the request then computes its whole prompt.
        log()->warn("reloading {} into {} slot {} failed ({}): the slot is empty", file,
                    llama.backend().name, *t.p.slot, r.end.what());
        reg_.set_held(t, {}, 0);
    }
}

awaitable<bool> disk_tier::indexed_or_cleared(cache::index* idx, const std::string& key) {
    co_return co_await on_index(index_ex_, [idx, key] {
        if (idx->find(key)) return true;
        // A name without a row (a leftover, a link planted in the directory) goes first, so the
        // save makes a new file rather than writing through it.
        std::error_code ec;
        std::filesystem::remove(idx->slot_dir() / cache::file_name_for(key), ec);
        return false;
    });
}

awaitable<disk_action> disk_tier::snapshot(const request_scope& rq, routing::ticket& t,
                                           const prefix& p, bool on_demand, warm_watch* watch) {
    disk_action a;
    const auto cfg = rq.cfg;
    upstream::slot_client llama(rq.pool, cfg, t.p.backend);
    const auto& b = llama.backend();
    if (!on_demand && !saves_allowed(t.p.backend)) {
        log()->debug("no snapshot of {} on {}: saving there pauses after failed saves", p.key,
                     b.name);
        co_return a;
    }
    // One save of a key at a time: llama-server would write both into the same file.
    auto lease = leases_.take_exclusive(p.key);
    if (!lease) {
        log()->debug("no snapshot of {}: another request is saving it", p.key);
        co_return a;
    }
    auto* idx = p.index;
    if (p.ids.empty()) co_return a;
    // A file of the key indexed meanwhile (another request saved it between this request's
    // lookup and the lease) is never saved over: llama-server writes a file in place, so a save
    // would rewrite the inode a replica's directory may share by a hard link (under that
    // index's row), and a save that failed halfway would leave both truncated.
    if (co_await indexed_or_cleared(idx, p.key)) {
        log()->debug("no snapshot of {}: its file was saved meanwhile", p.key);
        co_return a;
    }
    const auto* tokens = &p.ids;
    // KV a request with its own adapters left would be reused as the base model's: erased.
    if (reg_.take_adapter(t.p.backend, *t.p.slot)) {
        if (!(co_await llama.erase(*t.p.slot)).ok()) {
            reg_.mark_adapter(t.p.backend, *t.p.slot);
            co_return a;
        }
        reg_.set_held(t, {}, 0);
    }
    upstream::connection** in_flight = nullptr;
    if (watch) {
        watch->backend = t.p.backend;
        watch->slot = *t.p.slot;
        watch->total = tokens->size();
        watch->now = warm_watch::phase::prefill;
        in_flight = watch->in_flight;
    }
    // Shown in status while it runs, with the slot's own count of tokens done.
    std::optional<routing::work_mark> priming;
    priming.emplace(reg_, t.p.backend, *t.p.slot, routing::slot_work::priming, tokens->size());
    // First up to where the request's last user message starts (on a hybrid model): the slot
    // then has the context checkpoint llama-server makes there for the request itself, which
    // a later question or session that parts from this prefix rolls back to.
    std::uint64_t first_primed = 0;
    if (p.checkpoint_at > 0 && p.checkpoint_at < tokens->size()) {
        const std::vector<int> head(tokens->begin(),
                                    tokens->begin() + static_cast<std::ptrdiff_t>(p.checkpoint_at));
        const auto r = co_await llama.prime(*t.p.slot, head, in_flight);
        if (r.value) first_primed = static_cast<std::uint64_t>(std::max(0L, r.value->processed));
    }
    // The slot now gets exactly the prefix: what the request would compute first anyway.
    const auto primed = co_await llama.prime(*t.p.slot, *tokens, in_flight);
    priming.reset();
    const auto& prime_stats = primed.value;
    const bool from_scratch = prime_stats && prime_stats->cached == 0;
    // The answer's status is not the test (a chat parser may refuse the one sampled token after
    // the prompt is in the slot): the slot must hold exactly the prefix.
    const auto seen =
        primed.end.answered ? co_await look_at_slot(llama, *t.p.slot, tokens->size()) : slot_seen{};
    if (primed.end.answered) {
        // The priming's prefill, from its timings or else from the slot's own count.
        a.primed = first_primed +
                   (prime_stats ? static_cast<std::uint64_t>(std::max(0L, prime_stats->processed))
                                : seen.processed);
        primed_total_.fetch_add(a.primed, std::memory_order_relaxed);
    }
    if (!seen.holds) {
        reg_.set_held(t, {}, 0);
        co_return a;
    }
    reg_.set_held(t, p.levels, tokens->size());
    if (watch) watch->now = warm_watch::phase::save;
    cache::snapshot s;
    const bool ok = co_await save_file(rq, t, p, tokens->size(), s);
    saved(t.p.backend, ok);
    if (!ok) co_return a;
    if (s.tokens != tokens->size()) {
        // Another task ran on the slot between the priming and the save: the file holds its
        // prompt, not the prefix. Never indexed under the prefix's key (nor left behind).
        log()->warn(
            "saving slot {} of {} wrote {} tokens where the prefix has {}: another task "
            "used the slot; no snapshot",
            *t.p.slot, b.name, s.tokens, tokens->size());
        reg_.set_held(t, {}, 0);
        co_await on_index(index_ex_, [idx, key = p.key] {
            idx->drop(key);
            return true;
        });
        co_return a;
    }
    co_await on_index(index_ex_, [this, idx, s, max_disk = cfg->cache.max_disk,
                                  own = cfg->cache.max_disk_of(s.tenant)] {
        idx->put(s);
        // The tenant's own budget first (only its files), then the directory's (anyone's).
        if (own) idx->enforce_tenant_budget(s.tenant, *own, leases_.held());
        auto dropped = idx->enforce_budget(max_disk, leases_.held());
        // A file an earlier save wrote after warmslot gave up on it has no row: it goes now.
        if (const auto late = idx->sweep_unindexed(leases_.held()); late > 0) {
            log()->info("{} slot file(s) of {} written after their save timed out deleted", late,
                        idx->slot_dir().string());
        }
        return dropped;
    });
    publish(rq.cfg, t.p.backend, s,
            idx->slot_dir() / s.file);  // to the shared tier, in the background
    a.what = disk_action::kind::snapshotted;
    a.tokens = s.tokens;
    a.key = p.key;
    // Only a model that rolls back to checkpoints alone has any to drop: on a full-attention
    // model the reload would be a second transfer of the whole file before the first token, and
    // a sliding-window model run without --swa-full recomputes everything after a restore. A
    // model whose architecture is not known is reloaded, as a hybrid one would need.
    const auto info = reg_.info(t.p.backend);
    const bool checkpoints_only = !info || info->architecture.empty() ||
                                  routing::rolls_back_to_checkpoints_only(info->architecture);
    if (from_scratch && checkpoints_only) co_await drop_checkpoints(llama, t, s.file, s.tokens);
    co_return a;
}

// Saves the slot (primed with exactly `p`) as p's file and fills `s` for the index. A save that
// fails for want of disk space makes room (the budget's least valuable files) and tries once
// more; any other failure evicts nothing (cache::judge_save_failure).
awaitable<bool> disk_tier::save_file(const request_scope& rq, routing::ticket& t, const prefix& p,
                                     std::size_t tokens, cache::snapshot& s) {
    upstream::slot_client llama(rq.pool, rq.cfg, t.p.backend);
    const auto& b = llama.backend();
    auto* idx = p.index;
    const std::string file = cache::file_name_for(p.key);
    const routing::work_mark saving(reg_, t.p.backend, *t.p.slot, routing::slot_work::saving,
                                    tokens);
    auto r = co_await llama.save(*t.p.slot, file);
    if (r.end.answered && r.end.status != 200) {
        double per_token = default_bytes_per_token;
        {
            std::lock_guard lock(mu_);
            if (auto it = backends_.find(t.p.backend); it != backends_.end())
                per_token = it->second.bytes_per_token.value_or(default_bytes_per_token);
        }
        const auto need = static_cast<std::uint64_t>(static_cast<double>(tokens) * per_token * 1.1);
        const auto decision = co_await on_index(
            index_ex_,
            [this, idx, key = p.key, file, status = r.end.status, body = r.end.body, need] {
                remove_unindexed(*idx, key, file);  // what the failed save wrote takes room too
                std::error_code ec;
                const auto space = std::filesystem::space(idx->slot_dir(), ec);
                const std::optional<std::uint64_t> free =
                    ec ? std::nullopt : std::optional<std::uint64_t>(space.available);
                const auto d = cache::judge_save_failure({false, status, body}, free, need);
                if (d.retry()) {
                    const auto total = idx->total_bytes();
                    const auto dropped = idx->enforce_budget(
                        total > d.evict_bytes ? total - d.evict_bytes : 0, leases_.held());
                    log()->warn("the disk of {} is full: {} slot files deleted to make room",
                                idx->slot_dir().string(), dropped.size());
                }
                return d;
            });
        if (decision.retry()) r = co_await llama.save(*t.p.slot, file);
    }
    if (!r.value) {
        log()->warn("saving slot {} of {} failed ({}): going on without a snapshot", *t.p.slot,
                    b.name, r.end.what());
        co_await on_index(index_ex_, [idx, key = p.key, file] {
            remove_unindexed(*idx, key, file);
            return true;
        });
        co_return false;
    }
    s.key = p.key;
    s.tenant = p.tenant;
    s.identity = reg_.info(t.p.backend)->identity;
    s.file = file;
    s.tokens = r.value->tokens;
    s.bytes = r.value->bytes;
    s.created = s.last_used = unix_now();
    s.save_ms = r.value->ms;
    const auto views = reg_.snapshot();
    s.prefill_seconds =
        static_cast<double>(s.tokens) /
        std::max(1.0, views[static_cast<std::size_t>(t.p.backend)].prefill_tokens_per_second);
    if (s.tokens > 0 && s.bytes > 0) {
        std::lock_guard lock(mu_);
        backends_[t.p.backend].bytes_per_token =
            static_cast<double>(s.bytes) / static_cast<double>(s.tokens);
    }
    co_return true;
}

void disk_tier::check(int backend, const disk_action& a,
                      const std::optional<api::prompt_stats>& s) {
    if (s && a.what == disk_action::kind::none && a.kept_prefix_tokens > 0) {
        // A full-attention model without a sliding window cuts its KV anywhere: what it
        // recomputed of P was not a rollback's cost but a slot that did not hold P (a restart
        // between two checks, outside traffic). Learned, it would make every later rollback
        // there a restore.
        const auto info = reg_.info(backend);
        if (info && !info->architecture.empty() && !info->sliding_window &&
            !routing::rolls_back_to_checkpoints_only(info->architecture)) {
            return;
        }
        const auto cached = static_cast<std::uint64_t>(std::max(0L, s->cached));
        const auto processed = static_cast<std::uint64_t>(std::max(0L, s->processed));
        std::lock_guard lock(mu_);
        backends_[backend].rollbacks.observe(a.key, a.kept_prefix_tokens, cached + processed,
                                             processed);
        return;
    }
    if (a.what != disk_action::kind::restored || !s || a.tokens == 0 || !a.judged) return;
    const bool useful =
        cache::restore_was_useful(a.tokens, static_cast<std::uint64_t>(std::max(0L, s->cached)));
    std::lock_guard lock(mu_);
    auto& judge = backends_[backend].judge;
    if (!judge.record(useful, cache::policy_clock::now())) return;
    const auto pause = std::chrono::duration_cast<std::chrono::seconds>(judge.off_until -
                                                                        cache::policy_clock::now());
    log()->warn(
        "backend {}: {} restored prefixes in a row saved less than half their tokens (the "
        "last: {} restored, {} reused); this model or its flags cannot resume from a slot "
        "file (a sliding-window model needs --swa-full). Restores there pause for {} s.",
        src_.current()->backends[static_cast<std::size_t>(backend)].name,
        cache::restore_judge::useless_limit, a.tokens, s->cached, pause.count());
}

}  // namespace warmslot::tier
