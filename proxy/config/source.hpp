// The config snapshot warmslot runs under, swapped as a whole when the file is reloaded.
//
// Readers take a shared_ptr to the current snapshot and keep it for as long as they use it (a
// request keeps the one it started with until it ends), so a reload never changes a snapshot
// under anyone's feet and an old one is freed when its last request ends. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

#include "config/config.hpp"

namespace warmslot::config {

using snapshot = std::shared_ptr<const config>;

class source {
public:
    explicit source(config initial)
        : current_(std::make_shared<const config>(std::move(initial))) {}

    snapshot current() const {
        std::lock_guard lock(mu_);
        return current_;
    }
    void publish(snapshot next) {
        std::lock_guard lock(mu_);
        current_ = std::move(next);
    }

private:
    mutable std::mutex mu_;
    snapshot current_;
};

}  // namespace warmslot::config
