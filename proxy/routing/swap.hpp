// Swap groups: which member of a group of backends that share a device to stop, and which to
// start, at one moment. Pure: the supervisor (app/supervisor.cpp) describes the group as it is
// and carries out the decision; nothing here knows processes, clocks or threads.
//
// The rules, in order:
// - A member that is not stopped (starting, running or being drained) holds its place; a place
//   frees only once its process is gone, so the members with a process always form an allowed
//   set, not even for the length of a swap. The allowed sets are every set of at most
//   `max_running` members, or, when `allow` lists them, the subsets of one of those sets.
// - Stopped members with waiting requests are served in the order their oldest request began
//   to wait (fair between models: the one that waited longest goes first). A waiter starts
//   when it fits beside the members with a process and beside those that stay once the drains
//   under way end (with the waiters promised a place before it); else it waits for those
//   drains when they make room for it; else the fewest members that make room are drained.
// - The member drained for a waiter is a running one nobody uses (no request in flight, none
//   waiting) if there is one, else one whose residency (time since it turned healthy) reached
//   `min_residency`: a member that just started keeps its place while it serves requests, so
//   two busy models do not thrash. Among those: not the home, then the least recently used
//   (with `allow`, among the sets whose drains make room: the fewest members, then the fewest
//   in use, then the fewest homes, then the least recently used). A starting member is never
//   drained. A waiter that cannot get room keeps the ones behind it waiting too.
// - With nobody waiting, the home member starts when it fits, or takes the place of the
//   member (or the fewest members) idle for `home_after`.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace warmslot::routing::swap {

using clock = std::chrono::steady_clock;

enum class state {
    stopped,   // no process
    starting,  // process started, not healthy yet
    running,   // healthy, takes requests
    draining,  // chosen to stop: its requests finish, its slots are saved, then it stops
};

struct member {
    state st = state::stopped;
    std::size_t waiting = 0;          // requests waiting for it to take requests
    clock::time_point oldest_wait{};  // when the first of them began to wait
    std::size_t busy = 0;             // requests admitted on it, not finished
    // When it began to take requests (turned healthy), else when its process was started:
    // its residency counts from then, so a slow load does not use up its min_residency.
    clock::time_point started{};
    clock::time_point last_use{};  // when a request last ran on it
    bool home = false;
};

struct limits {
    std::size_t max_running = 1;
    clock::duration min_residency{};
    clock::duration home_after{};
    // The sets of members that may run together, as indexes into the members' span; empty:
    // any `max_running` of them.
    std::vector<std::vector<std::size_t>> allow{};
};

struct decision {
    std::vector<std::size_t> start;  // members to start now (indexes into the span)
    std::vector<std::size_t> drain;  // members to drain, save and stop now
    // A member that keeps a waiter out only because its residency has not reached
    // min_residency (the first such one found), for the log; std::nullopt when none.
    std::optional<std::size_t> held_by;
    bool empty() const noexcept { return start.empty() && drain.empty(); }
};

decision decide(const limits& lim, std::span<const member> members, clock::time_point now);

// Places held (members not stopped).
std::size_t occupied(std::span<const member> members);

// Whether the members marked in `set` (one flag per member) may run together.
bool allowed(const limits& lim, const std::vector<bool>& set);

}  // namespace warmslot::routing::swap
