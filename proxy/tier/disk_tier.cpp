#include "tier/disk_prefix.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <chrono>
#include <iterator>

// The constructor owns the shared tier's (not yet started) pool: its type must be complete.
#include <boost/asio/thread_pool.hpp>


#include "api/prefix_cut.hpp"
#include "routing/observations.hpp"
#include "routing/planner.hpp"
#include "cache/slot_file.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

using nlohmann::json;
constexpr std::size_t max_counted_prefixes = 65536;  // uses_ entries (snapshot_after_uses)

// Whether a failed restore drops its file, and why (`what`). llama-server's answer is the same
// for a damaged file and a full KV cache: the file itself tells them apart (cache/slot_file).
awaitable<bool> drop_after_failure(net::any_io_executor index_ex, cache::index* idx,
                                   const cache::snapshot& s, const upstream::call_end& r,
                                   const char*& what) {
    const cache::slot_call_result result{!r.answered, r.status, r.body};
    if (cache::judge_restore_failure(result) == cache::restore_failure::keep_file) co_return false;
    auto state = cache::file_state::intact;
    if (idx) {
        state = co_await on_index(index_ex, [path = idx->slot_dir() / s.file, bytes = s.bytes] {
            return cache::check_slot_file(path, bytes);
        });
    }
    if (cache::judge_restore_failure(result, state) == cache::restore_failure::drop_file) {
        what = "llama-server cannot use the file, dropped";
        co_return true;
    }
    what = "the file is intact (no free cells in the KV cache), kept";
    co_return false;
}

}  // namespace

std::string describe(const disk_action& a) {
    if (!a.unloaded.empty()) {
        auto plain = a;
        plain.unloaded.clear();
        const auto rest = describe(plain);
        return rest.empty() ? a.unloaded : a.unloaded + "; " + rest;
    }
    if (a.save_due > 0 && !a.after_answer) {
        // Sent in the answer's headers: the save comes after the answer.
        if (a.what == disk_action::kind::restored)
            return fmt::format("restored {} tokens, snapshot {} tokens after the answer", a.tokens,
                               a.save_due);
        if (a.what == disk_action::kind::none)
            return fmt::format("snapshot {} tokens after the answer", a.save_due);
        if (a.what == disk_action::kind::snapshotted)
            return fmt::format("snapshot {} tokens, then {} tokens after the answer", a.tokens,
                               a.save_due);
    }
    switch (a.what) {
        case disk_action::kind::none: return a.choice.empty() ? "" : "slot kept: " + a.choice;
        case disk_action::kind::restored:
            if (a.shared)
                return fmt::format("restored {} tokens (from the shared tier, copied)", a.tokens);
            if (!a.from.empty())
                return fmt::format("restored {} tokens (from replica {}, {})", a.tokens, a.from,
                                   a.brought);
            if (a.extended_to > 0)
                return fmt::format("restored {} tokens, then snapshot {} tokens{}", a.tokens,
                                   a.extended_to, a.after_answer ? " saved after the answer" : "");
            return a.choice.empty()
                       ? fmt::format("restored {} tokens", a.tokens)
                       : fmt::format("restored {} tokens, cheaper than a rollback: {}", a.tokens,
                                     a.choice);
        case disk_action::kind::snapshotted:
            if (a.extended_to > 0)  // primed and saved before, the whole prompt after the answer
                return fmt::format("snapshot {} tokens, then {} tokens saved after the answer",
                                   a.tokens, a.extended_to);
            return a.after_answer ? fmt::format("snapshot {} tokens saved after the answer", a.tokens)
                                  : fmt::format("snapshot {} tokens", a.tokens);
        case disk_action::kind::restore_failed:
            return a.file_dropped ? "restore failed, file dropped, recomputed"
                                  : "restore failed, file kept, recomputed";
    }
    return "";
}

disk_tier::disk_tier(const config::source& src, routing::registry& reg,
                     net::any_io_executor index_ex, net::any_io_executor file_ex)
    : src_(src), reg_(reg), index_ex_(std::move(index_ex)), file_ex_(std::move(file_ex)),
      shared_(std::make_shared<shared_state>()) {
    shared_->tag = shared_tag();
    std::lock_guard lock(mu_);
    open_indexes(*src_.current());
}

void disk_tier::open_indexes(const config::config& cfg) {
    if (!cfg.cache.enabled) return;
    for (const auto& b : cfg.backends) {
        if (b.retired || b.slot_save_path.empty() || indexes_.count(b.slot_save_path)) continue;
        const std::filesystem::path dir(b.slot_save_path);
        // warmslot makes the directory of a backend it starts; another's is the user's to make.
        if (b.supervised()) std::filesystem::create_directories(dir);
        auto idx = std::make_unique<cache::index>(dir / "warmslot-index.sqlite", dir);
        for (const auto& r : idx->splits()) {
            splits_.add(r.identity, r.hash, static_cast<std::size_t>(r.blocks),
                        static_cast<std::uint64_t>(std::max<std::int64_t>(r.last_passed, 0)));
        }
        indexes_[b.slot_save_path] = std::move(idx);
    }
}

void disk_tier::sync() {
    const auto cfg = src_.current();
    std::lock_guard lock(mu_);
    try {
        open_indexes(*cfg);
    } catch (const std::exception& e) {
        log()->error("disk tier: {}", e.what());
    }
}

// The cache switched off by a reload stops new snapshots and restores; files stay.
cache::index* disk_tier::index_for(int backend) const {
    const auto cfg = src_.current();
    if (!cfg->cache.enabled || backend < 0 ||
        static_cast<std::size_t>(backend) >= cfg->backends.size()) {
        return nullptr;
    }
    const auto& dir = cfg->backends[static_cast<std::size_t>(backend)].slot_save_path;
    if (dir.empty()) return nullptr;  // no slot files: no index (and no lock to take)
    std::lock_guard lock(mu_);
    auto it = indexes_.find(dir);
    return it == indexes_.end() ? nullptr : it->second.get();
}

bool disk_tier::restores_allowed(int backend) {
    const auto info = reg_.info(backend);
    std::lock_guard lock(mu_);
    auto& judge = backends_[backend].judge;
    if (info) judge.observe_identity(info->identity);  // another model or build: judged afresh
    return judge.allowed(cache::policy_clock::now());
}

bool disk_tier::saves_allowed(int backend) const {
    std::lock_guard lock(mu_);
    const auto it = backends_.find(backend);
    return it == backends_.end() || it->second.saves.allowed(cache::policy_clock::now());
}

void disk_tier::saved(int backend, bool ok) {
    std::lock_guard lock(mu_);
    auto& b = backends_[backend].saves;
    if (ok) {
        b.succeeded();
        return;
    }
    b.failed(cache::policy_clock::now());
    log()->warn("backend {}: saving a slot failed; no automatic save there for {} s",
                src_.current()->backends[static_cast<std::size_t>(backend)].name,
                b.pause().count());
}

bool disk_tier::enabled_for(int backend) const {
    return backend >= 0 && index_for(backend) != nullptr;
}

namespace {

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
std::optional<disk_tier::prefix> disk_tier::stable_prefix(int backend,
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
    if (!may_reach(fp.levels[stable - 1].bytes, src_.current()->cache.min_prefix_tokens)) {
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

awaitable<bool> disk_tier::place_tokens(upstream::pool& pool, int backend, prefix& p,
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
        const auto ids = co_await prefix_tokens(pool, backend, p.messages, *p.body, chain.tokens());
        if (!ids) co_return false;
        n = ids->size();
        remember_placed(memo, n);
    }
    p.key = chain.key_at(n);
    p.ids.assign(chain.tokens().begin(), chain.tokens().begin() + static_cast<std::ptrdiff_t>(n));
    co_return true;
}

std::optional<disk_tier::prefix> disk_tier::learned_prefix(int backend,
                                                           const cache::token_chain& chain,
                                                           const json& body,
                                                           cache::index* idx) {
    const auto info = reg_.info(backend);
    if (!info || idx == nullptr) return std::nullopt;
    std::size_t blocks = 0;
    std::vector<cache::split_points::made> made;
    const auto now = unix_now();
    {
        std::lock_guard lock(mu_);
        blocks = splits_.observe(info->identity, chain.blocks(), static_cast<std::uint64_t>(now),
                                 &made);
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
    if (n == 0 || n >= chain.size() || n < src_.current()->cache.min_prefix_tokens) {
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
    upstream::pool& pool, int backend, const routing::fingerprint& fp, const json& body,
    const std::string& tenant) {
    if (!enabled_for(backend)) co_return std::nullopt;
    // The whole prompt holds every prefix a file could keep.
    if (!may_reach(fp.total_bytes, src_.current()->cache.min_prefix_tokens)) co_return std::nullopt;
    try {
        co_return co_await chain_and_prefix(pool, backend, fp, body, tenant);
    } catch (const std::exception& e) {
        log()->warn("disk tier skipped for this request: {}", e.what());
    }
    co_return std::nullopt;
}

awaitable<disk_action> disk_tier::prepare(upstream::pool& pool, routing::ticket& t,
                                          const routing::fingerprint& fp, const json& body,
                                          const cache::token_chain& chain, std::string tenant,
                                          bool save_after_answer) {
    disk_action none;
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return none;
    auto* idx = index_for(t.p.backend);
    auto msg = stable_prefix(t.p.backend, fp, body);
    const bool judged = !(body.contains("cache_prompt") && body["cache_prompt"] == false);
    // Nothing here fails the request: an index error (SQLITE_FULL on a full disk) only skips
    // the disk tier, and what the registry believes of the slot was set by each step as it went.
    try {
        // Files are named by the tokens they hold: the request's own tokens find them.
        if (msg) {
            msg->tenant = tenant;
            if (!co_await place_tokens(pool, t.p.backend, *msg, chain)) msg.reset();
        }
        auto learned = learned_prefix(t.p.backend, chain, body, idx);
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
            const auto info = reg_.info(t.p.backend);
            const auto own = co_await on_index(index_ex_, [idx, identity = info ? info->identity : std::string(), &chain] {
                return idx->longest_prefix(identity, chain);
            });
            longest = own ? own->tokens : 0;
        }
        const std::size_t shared = slot_common ? *slot_common * cache::token_block
                                  : msg        ? msg->ids.size()
                                               : 0;
        if (msg && t.p.matched_levels >= msg->levels.size() &&
            (!longest || *longest <= shared + cache::token_block)) {
            remember(t.p.backend, *t.p.slot, *msg);
            disk_action a;
            if (t.p.matched_levels == msg->levels.size() && holds_more(t, *msg)) {
                a = co_await restore_or_keep(pool, t, *msg, judged);
            }
            if (save_after_answer) co_await conversation_due(t, chain, longest, tenant, a);
            co_return a;
        }
        co_return co_await miss(pool, t, std::move(msg), std::move(learned), chain, judged,
                                fp.floating, slot_common, save_after_answer && !fp.floating,
                                save_after_answer, tenant);
    } catch (const std::exception& e) {
        log()->warn("disk tier skipped for this request: {}", e.what());
        if (msg && !msg->key.empty()) remember(t.p.backend, *t.p.slot, *msg);
    }
    co_return none;
}

// The slot does not hold the request's stable messages. Restores the longest file that holds a
// prefix of the request's tokens (own directory, else a replica's or the shared tier's file of
// the stable messages' tokens), then primes and saves a longer split point when one is due:
// the learned one first when no file holds it (every later session that passes it can restore
// it), else the stable messages once they were used snapshot_after_uses times.
awaitable<disk_action> disk_tier::miss(upstream::pool& pool, routing::ticket& t,
                                       std::optional<prefix> msg, std::optional<prefix> learned,
                                       const cache::token_chain& chain, bool judged,
                                       bool floating, std::optional<std::size_t> slot_common,
                                       bool defer, bool conversation, const std::string& tenant) {
    disk_action none;
    const auto cfg = src_.current();
    const auto* primary = msg ? &*msg : learned ? &*learned : nullptr;
    // With neither, a conversation's own file may still hold the start of the prompt.
    if (primary == nullptr && !conversation) co_return none;
    auto* idx = primary ? primary->index : index_for(t.p.backend);
    if (idx == nullptr) co_return none;
    // Another request is saving this prefix right now (a burst on one document): its file
    // is what this slot needs, for less than computing the prefix again.
    if (primary && co_await wait_for_save(primary->key)) {
        log()->debug("waited for the save of {}", primary->key);
    }
    const bool allowed = restores_allowed(t.p.backend);
    const auto identity = reg_.info(t.p.backend) ? reg_.info(t.p.backend)->identity : std::string();
    std::optional<found_file> found;
    cache::key_leases::lease lease;
    if (allowed) {
        // The conversation's own file, saved after the answer of its last request, may be
        // being written right now: it holds more than any file indexed yet.
        if (conversation && co_await wait_for_saves_of(chain, 0)) {
            log()->debug("waited for a conversation file of this prompt");
        }
        const auto own = co_await on_index(index_ex_, [idx, identity, &chain] {
            return idx->longest_prefix(identity, chain);
        });
        if (own) {
            // Leased, then looked up again: no eviction deletes it from here to the restore.
            lease = leases_.take(own->key);
            auto again = co_await on_index(index_ex_, [idx, key = own->key] { return idx->find(key); });
            if (again) found = found_file{std::move(*again), "", ""};
        }
        if (!found && msg) {
            lease = leases_.take(msg->key);
            found = co_await find_file(t.p.backend, *msg, true);
        }
    }
    // The file to prime and save when due; a learned split point that a file already holds (or
    // covers) is not.
    const std::uint64_t have = found ? found->row.tokens : 0;
    const bool rolls_back_only = [&] {
        const auto info = reg_.info(t.p.backend);
        return info && routing::rolls_back_to_checkpoints_only(info->architecture);
    }();
    // A slot holding a longer prompt is cut back for free on a full-attention model; a hybrid
    // one recomputes from its last checkpoint before the cut. That is what the request itself
    // costs when the slot's prompt parts from it right at the split point (the split point was
    // learned from them), within a block: the checkpoint before is the same. Elsewhere it may
    // be the start: primed then only on a slot that shares nothing with the request, or right
    // after a restore extends it.
    const auto at_split = [&](const prefix& p) {
        const std::size_t blocks = p.ids.size() / cache::token_block;
        return slot_common && *slot_common >= blocks && *slot_common <= blocks + 1;
    };
    const prefix* target = nullptr;
    if (learned && learned->ids.size() > have &&
        (!rolls_back_only || found || t.p.matched_levels == 0 || at_split(*learned)) &&
        // A floating request lands where llama-server finds the most of its prompt.
        (!floating || static_cast<double>(learned->ids.size()) >
                          2 * routing::floating_similarity * static_cast<double>(chain.size()))) {
        target = &*learned;
    }
    if (msg) {
        std::uint64_t uses = 0;
        {
            std::lock_guard lock(mu_);
            // Bounded: past the limit, counts restart (keys are hashes, so the half dropped is
            // an arbitrary one); a prefix then waits a few more uses for its snapshot.
            if (uses_.size() >= max_counted_prefixes) {
                const auto half = static_cast<std::ptrdiff_t>(uses_.size() / 2);
                uses_.erase(uses_.begin(), std::next(uses_.begin(), half));
            }
            uses = ++uses_[msg->key];
        }
        if (!target && msg->ids.size() > have && uses >= cfg->cache.snapshot_after_uses &&
            msg->ids.size() >= cfg->cache.min_prefix_tokens) {
            target = &*msg;
        }
    }
    // A floating request goes where llama-server finds the most of its prompt: when an idle
    // slot already shares as much as this slot would hold once prepared, the request runs
    // there whatever is done here. So the prefix is prepared there instead (the request would
    // write over what that slot holds past the shared part anyway), and this slot keeps what
    // it holds.
    if (floating) {
        const std::uint64_t would_hold = std::max<std::uint64_t>(
            found && allowed ? have : 0, target ? target->ids.size() : 0);
        const auto rival = would_hold > 0 ? token_rival(t, chain) : std::nullopt;
        const int planned = *t.p.slot;
        if (rival && rival->second >= would_hold &&
            static_cast<double>(rival->second) >
                routing::floating_similarity * static_cast<double>(chain.size()) &&
            reg_.move_reservation(t, rival->first)) {
            log()->info("{} slot {} already shares {} tokens of a floating request's prompt, as "
                        "many as slot {} would hold once prepared ({}): prepared there instead",
                        cfg->backends[static_cast<std::size_t>(t.p.backend)].name, rival->first,
                        rival->second, planned, would_hold);
        }
    }
    if (found && allowed) {
        prefix f;
        f.index = idx;
        f.key = found->row.key;
        f.ids.assign(chain.tokens().begin(),
                     chain.tokens().begin() + static_cast<std::ptrdiff_t>(
                                                  std::min<std::size_t>(found->row.tokens, chain.size())));
        if (msg && msg->key == f.key) f.levels = msg->levels;
        f.body = primary ? primary->body : nullptr;
        f.tenant = primary ? primary->tenant : tenant;
        // The slot's own prefix goes first when it is worth keeping and not on disk yet.
        // Restored, or failed and dropped: either way the request runs now; a failed file
        // is replaced by a fresh snapshot on the next use. That save, of another tenant's
        // prefix maybe, is charged to the tenant whose request asked for the restore.
        const auto before = co_await save_reserved(pool, t, f.key, false, f.tenant);
        if (msg) remember(t.p.backend, *t.p.slot, *msg);
        auto a = co_await restore(pool, t, f, found->row);
        a.primed += before.primed;
        a.judged = judged;
        if (a.what == disk_action::kind::restored) {
            a.from = found->from;
            a.brought = found->brought;
            a.shared = found->shared;
            lease.release();
            if (target && a.tokens == found->row.tokens && leave_due(t, *target, defer)) {
                a.save_due = target->ids.size();
            } else if (target && a.tokens == found->row.tokens) {
                prefix primed = *target;
                if (rolls_back_only) {
                    co_await mark_checkpoint(pool, t.p.backend, primed, chain, a.tokens);
                }
                const auto more = co_await snapshot(pool, t, primed, false);
                a.primed += more.primed;
                if (more.what == disk_action::kind::snapshotted) a.extended_to = more.tokens;
            }
        }
        if (conversation) {
            co_await conversation_due(t, chain, std::max(found->row.tokens, a.extended_to),
                                      tenant, a);
        }
        co_return a;
    }
    lease.release();
    if (msg) remember(t.p.backend, *t.p.slot, *msg);  // the request brings it there
    if (!allowed) co_return none;
    if (!target) {
        if (conversation) co_await conversation_due(t, chain, 0, tenant, none);
        co_return none;
    }
    if (leave_due(t, *target, defer)) {
        none.save_due = target->ids.size();
        co_return none;
    }
    prefix primed = *target;
    if (rolls_back_only) {
        const std::size_t held = slot_common ? *slot_common * cache::token_block : 0;
        co_await mark_checkpoint(pool, t.p.backend, primed, chain, held);
    }
    auto a = co_await snapshot(pool, t, primed, false);
    if (conversation) {
        const std::uint64_t made = a.what == disk_action::kind::snapshotted ? a.tokens : 0;
        co_await conversation_due(t, chain, made, tenant, a);
    }
    co_return a;
}

awaitable<void> disk_tier::mark_checkpoint(upstream::pool& pool, int backend, prefix& p,
                                           const cache::token_chain& chain, std::size_t held) {
    if (p.body == nullptr || !p.body->contains("messages") || !(*p.body)["messages"].is_array()) {
        co_return;
    }
    const auto& messages = (*p.body)["messages"];
    std::size_t last_user = messages.size();
    for (std::size_t i = messages.size(); i-- > 0;) {
        if (messages[i].is_object() && messages[i].value("role", "") == "user") {
            last_user = i;
            break;
        }
    }
    if (last_user == 0 || last_user >= messages.size()) co_return;
    json before = json::array();
    for (std::size_t i = 0; i < last_user; ++i) before.push_back(messages[i]);
    try {
        const auto ids = co_await prefix_tokens(pool, backend, before, *p.body, chain.tokens());
        // Only past what the slot holds of the prefix: a hybrid slot cannot go back into it.
        if (ids && ids->size() > held && ids->size() + cache::token_block < p.ids.size()) {
            p.checkpoint_at = ids->size();
        }
    } catch (const std::exception& e) {
        log()->debug("no checkpoint mark: {}", e.what());
    }
}

std::optional<std::size_t> disk_tier::slot_common_blocks(int backend, int slot,
                                                         const cache::token_chain& chain) const {
    std::lock_guard lock(mu_);
    const auto it = slot_blocks_.find({backend, slot});
    if (it == slot_blocks_.end()) return std::nullopt;
    return cache::common_blocks(it->second.blocks, chain.blocks());
}

// Waits while another request holds a lease on `key`: it is saving the prefix (then its file is
// found afterwards) or restoring it (a short wait, for nothing). Polls; at most as long as one
// slot call may take. True when it waited.
awaitable<bool> disk_tier::wait_for_save(const std::string& key) {
    if (leases_.count(key) == 0) co_return false;
    const auto deadline = std::chrono::steady_clock::now() + src_.current()->cache.slot_call_timeout;
    net::steady_timer timer(co_await net::this_coro::executor);
    while (leases_.count(key) > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
    co_return true;
}

awaitable<disk_action> disk_tier::restore(upstream::pool& pool, routing::ticket& t,
                                          const prefix& p, const cache::snapshot& s) {
    upstream::slot_client llama(pool, src_.current(), t.p.backend);
    const auto& b = llama.backend();
    auto* idx = p.index;
    const routing::work_mark restoring(reg_, t.p.backend, *t.p.slot, routing::slot_work::restoring,
                                       s.tokens);
    const auto called = std::chrono::steady_clock::now();
    const auto r = co_await llama.restore(*t.p.slot, s.file);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - called;
    disk_action a;
    a.key = p.key;
    if (!r.value) {
        // What the slot holds now is unknown (llama-server wipes it when a file does not load;
        // a restore that timed out may still run): believed empty.
        reg_.set_held(t, {}, 0);
        a.what = disk_action::kind::restore_failed;
        const char* what = "file kept";
        a.file_dropped = co_await drop_after_failure(index_ex_, idx, s, r.end, what);
        log()->warn("restoring {} into {} slot {} failed ({}): {}, recomputing", s.file, b.name,
                    *t.p.slot, r.end.what(), what);
        if (a.file_dropped) {
            co_await on_index(index_ex_, [idx, key = p.key] { idx->drop(key); return true; });
        }
        co_return a;
    }
    a.what = disk_action::kind::restored;
    // A file saved after an answer holds the prompt and the answer after the prefix its row
    // covers: what it vouches for is the prefix.
    a.tokens = std::min<std::uint64_t>(r.value->tokens, s.tokens);
    const double ms = r.value->ms;
    reg_.set_held(t, p.levels, a.tokens);
    {
        std::lock_guard lock(mu_);
        backends_[t.p.backend].restores.observe(s.bytes, ms);
    }
    if (on_restore_) on_restore_(t.p.backend, took.count());
    co_await on_index(index_ex_, [idx, key = p.key, ms] {
        idx->touch(key, unix_now(), ms);
        return true;
    });
    co_return a;
}

}  // namespace warmslot::tier
