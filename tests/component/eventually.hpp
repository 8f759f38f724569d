// Waiting for a condition in component tests: no fixed sleeps, every wait has a deadline and
// ends as soon as its condition holds.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace warmslot::testing {

// Polls `pred` until it holds (true) or `timeout` passes (false).
inline bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // poll interval, not a wait
    }
    return true;
}

}  // namespace warmslot::testing
