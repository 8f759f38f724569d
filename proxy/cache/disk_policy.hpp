// The disk tier's decisions about failures, as pure functions and small state machines: when a
// slot file is really bad, when the disk is really full, when to stop saving for a while, when
// restores are judged useless on a backend. No I/O, no clock of its own (callers pass `now`);
// not thread-safe (the disk tier guards each state with its mutex). Tested as tables.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace warmslot::cache {

using policy_clock = std::chrono::steady_clock;

// What llama-server answered to POST /slots/{id}?action=restore or save.
struct slot_call_result {
    bool transport_error = false;  // no answer: connection refused or dropped, or our timeout
    unsigned status = 0;           // HTTP status when answered
    std::string_view body;         // the answer's body
};

// A failed restore drops the file only when llama-server says the file cannot be used: its
// 400 "Unable to restore slot: ..." (missing file, truncated or corrupt file, a file of another
// shape or too long for the slot). A timeout, a dropped connection, a 5xx or any other answer
// says nothing about the file: it stays.
enum class restore_failure { drop_file, keep_file };
restore_failure judge_restore_failure(const slot_call_result& r);

// After a failed save: make room and try once more only when the disk is really full, i.e.
// llama-server could not write the file (500) and the slot directory's file system has less
// free space than the file needs. Any other failure (501: no --slot-save-path, a timeout, a
// dropped connection, a 500 with room on the disk) evicts nothing.
struct save_failure_decision {
    std::uint64_t evict_bytes = 0;  // free at least this many bytes of slot files, then retry
    bool retry() const { return evict_bytes > 0; }
};
save_failure_decision judge_save_failure(const slot_call_result& r,
                                         std::optional<std::uint64_t> free_bytes,
                                         std::uint64_t need_bytes);

// Saving on one backend after failures: no automatic save until `until`; the pause doubles
// with each failure in a row (first, 2x, 4x, ... up to `longest`); a success resets it.
struct save_backoff {
    static constexpr std::chrono::seconds first{10};
    static constexpr std::chrono::seconds longest{600};
    unsigned failures = 0;
    policy_clock::time_point until{};

    bool allowed(policy_clock::time_point now) const { return failures == 0 || now >= until; }
    void failed(policy_clock::time_point now);
    void succeeded() { *this = save_backoff{}; }
    std::chrono::seconds pause() const;  // the pause set by the last failure (0 without one)
};

// Whether restores are worth it on one backend, judged over several of them. A restore is
// useless when the request after it reused less than half the restored tokens (a sliding-window
// model without --swa-full; a template that renders today's date). `useless_limit` useless ones
// in a row turn restores off for `first_pause`, doubling each time up to `longest_pause`; when
// the pause is over, one restore is tried again: useful, and everything is forgotten; useless,
// and the next pause starts. A new backend identity (another model file, build or slot layout)
// starts afresh. Requests that asked llama-server not to reuse a prompt (cache_prompt: false)
// are not judged: the caller leaves them out.
struct restore_judge {
    static constexpr unsigned useless_limit = 3;
    static constexpr std::chrono::seconds first_pause{600};
    static constexpr std::chrono::seconds longest_pause{6 * 3600};

    std::string identity;
    unsigned useless_in_a_row = 0;
    unsigned pauses = 0;  // pauses in a row (for the doubling)
    policy_clock::time_point off_until{};

    // Starts afresh when the backend's identity changed.
    void observe_identity(const std::string& id);
    bool allowed(policy_clock::time_point now) const {
        return useless_in_a_row < useless_limit || now >= off_until;
    }
    // Records one judged restore. True when this one turned restores off.
    bool record(bool useful, policy_clock::time_point now);
};

// A restore counts as useful when the request reused at least half of what it restored.
bool restore_was_useful(std::uint64_t restored_tokens, std::uint64_t reused_tokens);

}  // namespace warmslot::cache
