// The supervisor's record of one supervised backend. Internal to app/supervisor*.cpp.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "app/supervisor.hpp"

namespace warmslot::app {

using routing::clock;

struct supervisor::child {
    std::unique_ptr<process> proc;
    bool wanted = false;        // should be running: start always, woken, or chosen by its group
    bool decided = false;       // `wanted` was set from the config once
    bool stopping = false;      // being drained, saved and stopped
    bool swapping = false;      // ... to make room in its swap group (timed for /metrics)
    bool healthy_seen = false;  // the monitor has seen this process healthy
    bool time_start = false;    // started for a waiter of a swap group: its start is timed
    bool time_restore = false;  // started by its swap group: its first restore is timed
    int failures = 0;           // consecutive short runs (backoff)
    int start_failures = 0;     // starts that ended before the process turned healthy
    std::string last_failure;   // why the last of them failed, for the waiters' error
    std::string asked_by;       // the tenant whose request asked for its latest start
    // The tenant whose request made its swap group drain it: the slots saved before it stops
    // are charged to that tenant. std::nullopt: a stop nobody asked for (idle, shutdown).
    std::optional<std::string> drained_for;
    std::multiset<clock::time_point> waits;  // requests of a swap group waiting for it
    // Requests wake() admitted on it that have not ended (their leases hold a reference).
    std::shared_ptr<std::atomic<std::size_t>> admitted =
        std::make_shared<std::atomic<std::size_t>>(0);
    clock::time_point started{}, next_start{}, last_use{};
    clock::time_point healthy_at{};  // when the monitor first saw this process healthy
};

}  // namespace warmslot::app
