// The routing planner: for one request, which backend and which slot. A pure function of what
// warmslot believes about every slot; tested as a table. No state: callable from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/fingerprint.hpp"

namespace warmslot::routing {

using clock = std::chrono::steady_clock;

// What warmslot believes one llama-server slot holds.
// What a slot does now, for status and the dashboard (the planner does not read it).
enum class slot_work : std::uint8_t { none, running, priming, restoring, saving };

struct slot_view {
    int id = 0;
    bool busy = false;               // running a request (ours, or seen in GET /slots)
    std::vector<prefix_level> held;  // fingerprint levels of the prompt it last processed
    std::uint64_t held_tokens = 0;   // tokens it holds (0 = empty or unknown)
    clock::time_point last_use{};    // when its last request finished
    double recent_hits = 0;          // decayed count of requests that reused its prefix
    clock::time_point busy_until{};  // expected end of the running request, when busy
    bool scratch = false;            // reserved for short one-off requests (see is_scratch)
    std::uint64_t session = 0;       // session hint of the request it last ran (0 = none)
    std::string owner;               // tenant whose request brought what it holds ("": the
                                     // default tenant); what a tenant-scoped view shows
    // What it does now: warmslot's own work on it (priming, restoring, saving), or a task
    // llama-server shows running there; with the prompt tokens done so far as GET /slots last
    // showed them, and the total when known (priming: the prefix, restore and save: the file).
    slot_work work = slot_work::none;
    std::uint64_t work_done = 0;
    std::uint64_t work_total = 0;
    clock::time_point work_since{};
};

struct backend_view {
    std::string name;
    std::vector<std::string> models;  // names this backend answers to (empty: any)
    bool healthy = true;
    bool pinning = true;  // false: slot contents are not stable, never send id_slot
    double prefill_tokens_per_second = 1000;  // learned from timings.prompt_per_second
    double tokens_per_byte = 0.3;             // learned from prompt tokens / prompt bytes
    std::size_t in_flight = 0;                // requests warmslot has running or queued there
    std::vector<slot_view> slots;
};

struct planner_settings {
    std::uint64_t short_request_tokens = 1000;  // below this (and no long segment): a one-off
    std::uint64_t long_segment_tokens = 512;    // a segment this long makes a request valuable
    bool scratch_slot = true;                   // keep the last slot for one-offs when slots >= 2
    std::size_t scratch_min_slots = 2;          // backends with fewer slots keep no scratch slot
    double max_wait_seconds = 600;              // never plan to wait longer than this for a slot
};

enum class route {
    hit,              // pinned to an idle slot that holds a prefix of the request
    wait_hit,         // the slot holding the prefix is busy; worth waiting for it. The caller
                      // waits until the slot is idle before sending: never pin it while busy.
    miss_new_prefix,  // no slot holds any of it
    miss_evicted,     // a slot held it (per history) but something else took that slot
    miss_slot_busy,   // a slot holds a prefix but using it costs more than recomputing: it is
                      // busy (wait too long), or its backend is loaded (rule 5 of `choose`);
                      // also: no slot is idle at all, slot = nullopt (the caller holds the
                      // request until one is: service/hold.cpp)
    miss_diverged,    // the pinned slot shares m >= 1 levels, holds a different level m, and
                      // m < the request's stable_levels: the stable part (system prompt,
                      // document, history) changed at level m = diverged_at, so prefill
                      // restarts there. Levels are chained hashes, so "an earlier version" is
                      // only seen as a shorter match. A slot holding exactly m levels that the
                      // request extends is a hit, not a divergence.
    scratch,          // a short one-off, sent to the scratch slot (or, when that is busy, to
                      // the idle slot cheapest to overwrite)
    pass_through,     // not routed: no fingerprint, a backend without stable slots, or a
                      // one-off while no slot is idle; slot = nullopt
};
std::string_view name(route r) noexcept;

struct plan {
    int backend = -1;         // index into the input's backends; -1: none available
    std::optional<int> slot;  // id_slot to pin; nullopt: llama-server chooses
    route why = route::pass_through;
    std::size_t matched_levels = 0;  // levels of the request the chosen slot already holds
    std::uint64_t expected_cached_tokens = 0;
    std::size_t diverged_at = 0;  // for miss_diverged: index of the first differing level
                                  // (also set for a wait_hit whose stable part diverged)
    bool unknown_model = false;   // backend -1 because no backend answers to the model
};

struct plan_input {
    const fingerprint* request = nullptr;  // null: not fingerprinted
    std::string_view model;                // the request's model ("" = any)
    const std::vector<backend_view>* backends = nullptr;
    planner_settings settings;
    clock::time_point now{};
    // Level hashes of prefixes recently evicted from a slot; lets the planner tell
    // miss_evicted from miss_new_prefix (any level hash of the request in this list).
    const std::vector<std::uint64_t>* recently_evicted = nullptr;
};

// Chooses backend and slot to maximise the prefill saved minus the time spent waiting.
// Estimates, per backend b: tokens = bytes x b.tokens_per_byte; P = request tokens /
// b.prefill_tokens_per_second (the whole prefill); S = saved tokens / rate for a slot's match.
//  1. Candidates: healthy backends that serve `model` (see `serves`). No backend at all serves
//     it: backend -1 with unknown_model (the caller answers 404). No healthy one: backend -1.
//  2. No fingerprint: pass_through on the candidate with the fewest in_flight (ties: lowest
//     index), no slot.
//  3. A slot matches m = common_levels(held, request) levels and saves the tokens of level m-1.
//     The match counts as a hit when it saves something and cuts no more than it saves: the
//     tokens the slot holds beyond the match (held.back() - level m-1, by bytes) <= saved. A
//     slot that extends into another question keeps counting ("same document, other question");
//     a slot sharing only the system prompt with another document does not (reusing it would
//     destroy the document to save a few tokens): it stays an eviction candidate, and if it is
//     overwritten the shared part is still reported as reused.
//  4. Every choice gets a cost in seconds, lowest wins:
//       cost = (1 + in_flight of the backend) x (P - S + wait)
//     hit (idle slot): wait = 0; wait_hit (busy slot holding a hit, wait = max(0, busy_until -
//     now) <= max_wait_seconds); miss (victim slot, S of its match, usually 0); pass_through
//     (pinning == false) and queue (no idle slot on the backend): S = 0, wait = 0.
//     Within one backend this means: the longest hit wins; a busy hit is waited for only when
//     its extra saving over the best idle alternative exceeds the wait (ties: do not wait).
//  5. Replicas: a hit on A loses to an idle replica B (in_flight 0, miss) exactly when
//     in_flight(A) x (P_A - S_A) > S_A, i.e. when the queue on A makes the prefill still needed
//     there cost more than the prefill saved. Among equal costs: hit, miss, pass_through,
//     wait_hit, queue, in that order; then the larger saving; then for hits the slot of the
//     request's own session (fingerprint::session), then the one that cuts fewer tokens it holds
//     beyond the match, then one that no other session ran last, then the one used least
//     recently (a new session of a known prefix takes the copy whose owner is least likely to
//     come back); then for misses the better victim; then fewer in_flight; then the lower
//     backend index and slot position. Between misses the load therefore comes before the
//     victim's value (a miss saves nothing, so the queue is this request's only cost).
//  6. Victim (a slot to overwrite), among idle slots that are not a hit: empty first (held_tokens
//     == 0 and nothing held), then the lowest held_tokens x (1 + recent_hits) (held_tokens 0
//     with levels held: estimated from bytes), then the oldest last_use. Never a busy slot.
//  7. Scratch (see is_scratch, is_one_off): a one-off on a backend with a scratch slot takes an
//     idle scratch slot, else the best idle victim among the other slots; route scratch. With no
//     idle slot: pass_through, no slot. A hit still beats it (a short follow-up in a
//     conversation reuses its slot). Other requests overwrite a scratch slot only when no other
//     slot of that backend is idle; a hit on it is taken by any request (its content is
//     expendable, and reusing it costs nothing).
//  8. Backends with pinning == false never get a slot: pass_through, cost with S = 0.
//  9. Routes. A pinned slot with m >= 1 that holds a different level m, m < stable_levels:
//     miss_diverged (diverged_at = m); any other m >= 1: hit (wait_hit stays wait_hit, with
//     diverged_at set the same way; a one-off placed by rule 7 stays scratch). A miss with
//     m == 0: miss_slot_busy if any hit was declined (busy or loaded), else miss_evicted if a
//     request level is in recently_evicted, else miss_new_prefix. No idle slot on the chosen
//     backend: slot nullopt, miss_slot_busy (a one-off: pass_through).
// 10. Floating requests (fingerprint::floating) go where llama-server's own choice
//     (get_available_slot) will put them, so that what warmslot prepares there is what the
//     request finds: per backend, among idle slots, the one sharing the most tokens with the
//     request when that is more than floating_similarity of it (ties: the lower id), else the
//     least recently used idle one (ties: the higher id, as llama-server's loop keeps the last);
//     no idle slot: queue. No scratch slot and no waiting for them: llama-server decides.
plan choose(const plan_input& in);

// Rule 10's other half. Once the disk tier has made the planned slot hold the request's stable
// prefix P (restored, primed, or kept with more), llama-server still sends the request to an
// idle slot that shares more of its prompt, and among equals to the lower id. The idle slots of
// `b` that may do so against slot `planned`: one sharing more levels of `request`; one sharing
// as many, when it holds more beyond them (its next tokens may match further) unless the planned
// slot holds exactly them and the other more, or both hold exactly them and it has the higher
// id; one of unknown content (levels unknown, tokens known) long enough to hold what the
// planned slot shares. None when the planned slot does not hold P. Busy slots are never named.
// The caller erases them: the request would otherwise run there, and on a hybrid model without
// a checkpoint at P it would recompute its whole prompt.
std::vector<int> floating_rivals(const backend_view& b, int planned, const fingerprint& request);

// llama-server's default --slot-prompt-similarity: below this share of the prompt, a slot's
// common prefix does not choose it (rule 10).
inline constexpr double floating_similarity = 0.1;

// True when `b` answers to `model`: its list is empty, `model` is "", or it is listed.
bool serves(const backend_view& b, std::string_view model) noexcept;

// The scratch slot(s) of a backend: none when settings.scratch_slot is off or the backend has
// fewer than 2 slots; else the slots marked slot_view::scratch when any is marked (the caller's
// choice is honoured), else the slot with the highest id.
bool is_scratch(const backend_view& b, const slot_view& s, const planner_settings& settings);

// A short one-off on `b`: request tokens < short_request_tokens and its longest segment
// < long_segment_tokens (both estimated with b.tokens_per_byte).
bool is_one_off(const fingerprint& request, const backend_view& b,
                const planner_settings& settings) noexcept;

}  // namespace warmslot::routing
