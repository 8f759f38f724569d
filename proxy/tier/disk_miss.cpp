// What a miss does (the slot does not hold the request's stable messages): find the longest
// file that holds a start of the request, choose the prefix due for a file, restore, then
// prime and save. See disk_tier.hpp (miss).
#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "routing/observations.hpp"
#include "routing/planner.hpp"
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

using nlohmann::json;
constexpr std::size_t max_counted_prefixes = 65536;  // uses_ entries (snapshot_after_uses)

}  // namespace

// One miss as it goes through its steps: what it was given, the file it found, and the prefix
// due for a file. Lives in miss()'s frame; the steps take it by reference.
struct disk_tier::miss_state {
    routing::ticket& t;
    const cache::token_chain& chain;
    std::optional<prefix> msg;      // the stable messages, placed on the request's tokens
    std::optional<prefix> learned;  // the longest learned split point the request passes
    bool judged;
    bool floating;
    std::optional<std::size_t> slot_common;
    bool defer;
    bool conversation;
    const std::string& tenant;
    config::snapshot cfg;
    const prefix* primary = nullptr;  // msg, else learned
    cache::index* idx = nullptr;
    bool allowed = false;               // restores are allowed on the backend
    std::optional<found_file> found{};  // the longest file that holds a start of the request
    cache::key_leases::lease lease{};   // on found's key (or msg's, while it was looked for)
    bool rolls_back_only = false;       // the model rolls back to its checkpoints only
    const prefix* target = nullptr;     // the prefix to prime and save when due
};

// The slot does not hold the request's stable messages. Restores the longest file that holds a
// prefix of the request's tokens (own directory, else a replica's or the shared tier's file of
// the stable messages' tokens), then primes and saves a longer split point when one is due:
// the learned one first when no file holds it (every later session that passes it can restore
// it), else the stable messages once they were used snapshot_after_uses times.
awaitable<disk_action> disk_tier::miss(const request_scope& rq, routing::ticket& t,
                                       std::optional<prefix> msg, std::optional<prefix> learned,
                                       const cache::token_chain& chain, bool judged, bool floating,
                                       std::optional<std::size_t> slot_common, bool defer,
                                       bool conversation, const std::string& tenant) {
    disk_action none;
    miss_state m{t,        chain,       std::move(msg), std::move(learned), judged,
                 floating, slot_common, defer,          conversation,       tenant,
                 rq.cfg};
    m.primary = m.msg ? &*m.msg : m.learned ? &*m.learned : nullptr;
    // With neither, a conversation's own file may still hold the start of the prompt.
    if (m.primary == nullptr && !conversation) co_return none;
    m.idx = m.primary ? m.primary->index : index_for(t.p.backend);
    if (m.idx == nullptr) co_return none;
    co_await find_for_miss(m);
    choose_due(m);
    if (floating) prepare_elsewhere(m);
    if (m.found && m.allowed) co_return co_await restore_found(rq, m);
    m.lease.release();
    if (m.msg) remember(t.p.backend, *t.p.slot, *m.msg);  // the request brings it there
    if (!m.allowed) co_return none;
    if (!m.target) {
        if (conversation) co_await conversation_due(*m.cfg, t, chain, 0, tenant, none);
        co_return none;
    }
    if (leave_due(t, *m.target, defer)) {
        none.save_due = m.target->ids.size();
        co_return none;
    }
    prefix primed = *m.target;
    if (m.rolls_back_only) {
        const std::size_t held = slot_common ? *slot_common * cache::token_block : 0;
        co_await mark_checkpoint(rq, t.p.backend, primed, chain, held);
    }
    auto a = co_await snapshot(rq, t, primed, false);
    if (conversation) {
        const std::uint64_t made = a.what == disk_action::kind::snapshotted ? a.tokens : 0;
        co_await conversation_due(*m.cfg, t, chain, made, tenant, a);
    }
    co_return a;
}

// Finds the longest file that holds a start of the request, when restores are allowed there:
// the backend's own, else the stable messages' file from a replica or the shared tier. First
// waits for a save of the prefix, or of the conversation's own file, that is under way.
awaitable<void> disk_tier::find_for_miss(miss_state& m) {
    const auto& t = m.t;
    const auto& chain = m.chain;
    auto* idx = m.idx;
    // Another request is saving this prefix right now (a burst on one document): its file
    // is what this slot needs, for less than computing the prefix again.
    if (m.primary && co_await wait_for_save(m.primary->key, m.cfg->cache.slot_call_timeout)) {
        log()->debug("waited for the save of {}", m.primary->key);
    }
    m.allowed = restores_allowed(t.p.backend);
    const auto identity = reg_.info(t.p.backend) ? reg_.info(t.p.backend)->identity : std::string();
    if (!m.allowed) co_return;
    // The conversation's own file, saved after the answer of its last request, may be
    // being written right now: it holds more than any file indexed yet.
    if (m.conversation && co_await wait_for_saves_of(chain, 0, m.cfg->cache.slot_call_timeout)) {
        log()->debug("waited for a conversation file of this prompt");
    }
    const auto own = co_await on_index(
        index_ex_, [idx, identity, &chain] { return idx->longest_prefix(identity, chain); });
    if (own) {
        // Leased, then looked up again: no eviction deletes it from here to the restore.
        m.lease = leases_.take(own->key);
        auto again = co_await on_index(index_ex_, [idx, key = own->key] { return idx->find(key); });
        if (again) m.found = found_file{std::move(*again), "", ""};
    }
    if (!m.found && m.msg) {
        m.lease = leases_.take(m.msg->key);
        m.found = co_await find_file(m.cfg, t.p.backend, *m.msg, true);
    }
}

// The file to prime and save when due (m.target): the learned split point, else the stable
// messages once they were used snapshot_after_uses times. Counts this use of the stable
// messages.
void disk_tier::choose_due(miss_state& m) {
    const auto& t = m.t;
    const auto& chain = m.chain;
    const auto& slot_common = m.slot_common;
    const auto& learned = m.learned;
    const auto& msg = m.msg;
    // A learned split point that a file already holds (or covers) is not due.
    const std::uint64_t have = m.found ? m.found->row.tokens : 0;
    m.rolls_back_only = [&] {
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
    if (learned && learned->ids.size() > have &&
        (!m.rolls_back_only || m.found || t.p.matched_levels == 0 || at_split(*learned)) &&
        // A floating request lands where llama-server finds the most of its prompt.
        (!m.floating || static_cast<double>(learned->ids.size()) >
                            2 * routing::floating_similarity * static_cast<double>(chain.size()))) {
        m.target = &*learned;
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
        if (!m.target && msg->ids.size() > have && uses >= m.cfg->cache.snapshot_after_uses &&
            msg->ids.size() >= m.cfg->cache.min_prefix_tokens) {
            m.target = &*msg;
        }
    }
}

// A floating request goes where llama-server finds the most of its prompt: when an idle
// slot already shares as much as this slot would hold once prepared, the request runs
// there whatever is done here. So the prefix is prepared there instead (the request would
// write over what that slot holds past the shared part anyway), and this slot keeps what
// it holds.
void disk_tier::prepare_elsewhere(miss_state& m) {
    auto& t = m.t;
    const auto& chain = m.chain;
    const std::uint64_t have = m.found ? m.found->row.tokens : 0;
    const std::uint64_t would_hold = std::max<std::uint64_t>(m.found && m.allowed ? have : 0,
                                                             m.target ? m.target->ids.size() : 0);
    const auto rival = would_hold > 0 ? token_rival(t, chain) : std::nullopt;
    const int planned = *t.p.slot;
    if (rival && rival->second >= would_hold &&
        static_cast<double>(rival->second) >
            routing::floating_similarity * static_cast<double>(chain.size()) &&
        reg_.move_reservation(t, rival->first)) {
        log()->info(
            "{} slot {} already shares {} tokens of a floating request's prompt, as "
            "many as slot {} would hold once prepared ({}): prepared there instead",
            m.cfg->backends[static_cast<std::size_t>(t.p.backend)].name, rival->first,
            rival->second, planned, would_hold);
    }
}

// Restores the file found, then primes and saves the prefix due past it (or leaves it due
// after the answer), and leaves the conversation's own file due when one is.
awaitable<disk_action> disk_tier::restore_found(const request_scope& rq, miss_state& m) {
    auto& t = m.t;
    const auto& chain = m.chain;
    const auto& found = *m.found;
    const auto* primary = m.primary;
    const auto* target = m.target;
    prefix f;
    f.index = m.idx;
    f.key = found.row.key;
    f.ids.assign(chain.tokens().begin(),
                 chain.tokens().begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                              found.row.tokens, chain.size())));
    if (m.msg && m.msg->key == f.key) f.levels = m.msg->levels;
    f.body = primary ? primary->body : nullptr;
    f.tenant = primary ? primary->tenant : m.tenant;
    // The slot's own prefix goes first when it is worth keeping and not on disk yet.
    // Restored, or failed and dropped: either way the request runs now; a failed file
    // is replaced by a fresh snapshot on the next use. That save, of another tenant's
    // prefix maybe, is charged to the tenant whose request asked for the restore.
    const auto before = co_await save_reserved(rq, t, f.key, false, f.tenant);
    if (m.msg) remember(t.p.backend, *t.p.slot, *m.msg);
    auto a = co_await restore(rq, t, f, found.row);
    a.primed += before.primed;
    a.judged = m.judged;
    if (a.what == disk_action::kind::restored) {
        a.from = found.from;
        a.brought = found.brought;
        a.shared = found.shared;
        m.lease.release();
        if (target && a.tokens == found.row.tokens && leave_due(t, *target, m.defer)) {
            a.save_due = target->ids.size();
        } else if (target && a.tokens == found.row.tokens) {
            prefix primed = *target;
            if (m.rolls_back_only) {
                co_await mark_checkpoint(rq, t.p.backend, primed, chain, a.tokens);
            }
            const auto more = co_await snapshot(rq, t, primed, false);
            a.primed += more.primed;
            if (more.what == disk_action::kind::snapshotted) a.extended_to = more.tokens;
        }
    }
    if (m.conversation) {
        co_await conversation_due(*m.cfg, t, chain, std::max(found.row.tokens, a.extended_to),
                                  m.tenant, a);
    }
    co_return a;
}

awaitable<void> disk_tier::mark_checkpoint(const request_scope& rq, int backend, prefix& p,
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
        const auto ids = co_await prefix_tokens(rq, backend, before, *p.body, chain.tokens());
        // Only past what the slot holds of the prefix: a hybrid slot cannot go back into it.
        if (ids && ids->size() > held && ids->size() + cache::token_block < p.ids.size()) {
            p.checkpoint_at = ids->size();
        }
    } catch (const std::exception& e) {
        log()->debug("no checkpoint mark: {}", e.what());
    }
}

}  // namespace warmslot::tier
