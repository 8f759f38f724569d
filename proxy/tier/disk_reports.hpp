// What the disk tier reports of its work: what prepare() did for one request, what an explicit
// save or warm-up did per slot, a warm-up's progress and failure, and a slot directory's
// listing. Plain values; the tier itself is tier/disk_tier.hpp.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "api/errors.hpp"
#include "cache/index.hpp"

namespace warmslot::upstream {
struct connection;
}

namespace warmslot::tier {

// What prepare() did for one request: reported in headers and the access log, checked after.
struct disk_action {
    enum class kind { none, restored, snapshotted, restore_failed } what = kind::none;
    std::uint64_t tokens = 0;  // tokens restored or primed
    // restored: then primed further to this many tokens and saved (a longer split point than
    // the file restored); 0 when not.
    std::uint64_t extended_to = 0;
    std::string key;
    // Prompt tokens llama-server computed for warmslot's own work before this request: priming
    // the prefix for a snapshot, and priming the slot's previous prefix to save it before a
    // restore. Part of X-Warmslot-Processed-Tokens, the access line and /metrics.
    std::uint64_t primed = 0;
    bool file_dropped = false;  // restore_failed: llama-server said the file is unusable
    // The slot held the prefix and more: why its file was restored, or why the slot was kept
    // for llama-server to roll back to the prefix (cache::choose_restore_or_rollback); "" when
    // there was no such choice.
    std::string choice;
    // Kept: the prefix's tokens, to learn afterwards what the rollback recomputed.
    std::uint64_t kept_prefix_tokens = 0;
    // The request lets llama-server reuse its prompt (not `cache_prompt: false`): only then does
    // what it reused say whether the restore was useful.
    bool judged = true;
    // restored: the file came from another backend's slot directory (a replica of the same
    // identity), named here, and how it was brought ("linked" or "copied"); "" for our own.
    std::string from;
    std::string brought;
    bool shared = false;  // restored: the file was copied from the shared tier (cache.shared_dir)
    // A prefix's file is due after the answer (prepare with `save_after_answer`): its tokens,
    // the prefix the file is to be indexed under; 0 when none is. What was done before the
    // request (a restore) stays in `what`.
    std::uint64_t save_due = 0;
    // snapshotted: by disk_tier::save_after_answer, with the answer in the file after the prefix.
    bool after_answer = false;
    // A router's other models unloaded to make room for this one, and what was saved of them
    // first (service/router_room.cpp); "" when none was.
    std::string unloaded;
};
std::string describe(const disk_action& a);

// What the disk tier did with one slot on an explicit save or warm-up.
struct slot_report {
    std::string backend;
    int slot = -1;  // -1: no slot was involved
    bool saved = false;
    std::string reason;        // why it was skipped or failed ("" when saved)
    std::uint64_t tokens = 0;  // tokens in the saved file
    std::string key;           // the prefix's content address
    std::uint64_t primed = 0;  // prompt tokens llama-server computed to prime the slot
};
struct save_report {
    std::vector<slot_report> slots;
};
nlohmann::json to_json(const slot_report& r);
nlohmann::json to_json(const save_report& r);

// What a warm-up does now, for a caller that shows its progress (POST /admin/warm streamed),
// and where that caller can cut it. Written by the warm-up, read by the caller's other
// coroutines: all on the request's worker.
struct warm_watch {
    int backend = -1;  // where the prefix is primed, once chosen
    int slot = -1;
    std::uint64_t total = 0;  // tokens of the prefix
    enum class phase { starting, prefill, save } now = phase::starting;
    // The priming call's connection while it runs: closing it cancels the prefill on
    // llama-server (upstream::call's in_flight).
    upstream::connection** in_flight = nullptr;
};

// One slot directory as its index lists it (the dashboard's disk panel).
struct disk_listing {
    std::string dir;
    std::vector<cache::snapshot> files;
};

// A warm-up that could not run at all (no backend for the model, no idle slot, ...).
struct warm_error {
    api::error_kind kind;
    std::string message;
};

}  // namespace warmslot::tier
