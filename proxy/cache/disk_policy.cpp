#include "cache/disk_policy.hpp"

#include <algorithm>

namespace warmslot::cache {

restore_failure judge_restore_failure(const slot_call_result& r) {
    if (r.transport_error || r.status != 400) return restore_failure::keep_file;
    // llama-server's one answer for a file it could not load (tools/server/server-context.cpp,
    // SERVER_TASK_TYPE_SLOT_RESTORE). Other 400s ("Invalid slot ID", "Invalid filename") are
    // about the call, not the file.
    return r.body.find("Unable to restore slot") != std::string_view::npos
               ? restore_failure::drop_file
               : restore_failure::keep_file;
}

save_failure_decision judge_save_failure(const slot_call_result& r,
                                         std::optional<std::uint64_t> free_bytes,
                                         std::uint64_t need_bytes) {
    save_failure_decision d;
    // llama-server answers 500 "Unable to save slot" when it cannot write the file.
    if (r.transport_error || r.status != 500 || !free_bytes) return d;
    if (*free_bytes >= need_bytes) return d;  // room enough: the failure is something else
    d.evict_bytes = need_bytes - *free_bytes;
    return d;
}

void save_backoff::failed(policy_clock::time_point now) {
    ++failures;
    until = now + pause();
}

std::chrono::seconds save_backoff::pause() const {
    if (failures == 0) return std::chrono::seconds{0};
    const unsigned doublings = std::min(failures - 1, 16u);
    const auto p = first * (std::int64_t{1} << doublings);
    return std::min<std::chrono::seconds>(p, longest);
}

void restore_judge::observe_identity(const std::string& id) {
    if (id == identity) return;
    *this = restore_judge{};
    identity = id;
}

bool restore_judge::record(bool useful, policy_clock::time_point now) {
    if (useful) {
        useless_in_a_row = 0;
        pauses = 0;
        off_until = {};
        return false;
    }
    ++useless_in_a_row;
    if (useless_in_a_row < useless_limit) return false;
    const unsigned doublings = std::min(pauses, 16u);
    const auto pause =
        std::min<std::chrono::seconds>(first_pause * (std::int64_t{1} << doublings), longest_pause);
    ++pauses;
    off_until = now + pause;
    useless_in_a_row = useless_limit;  // after the pause: one trial, then judged again
    return true;
}

bool restore_was_useful(std::uint64_t restored_tokens, std::uint64_t reused_tokens) {
    return restored_tokens == 0 || reused_tokens * 2 >= restored_tokens;
}

}  // namespace warmslot::cache
