// A ticket owned as a lease: what a registry reserved for one caller ends exactly once, however
// the caller's code ends.
//
// Ends: complete() (the answer was read: records what the slot holds now), release() (nothing
// reached the slot: what it is believed to hold stays), cancel() (something may have reached
// it: what it holds is forgotten until the next GET /slots or answer), or end(), which is
// release() until sent() was called and cancel() after. Destroyed while still open (an
// exception, a coroutine destroyed by a cancellation or a stop) it cancels: the one end that
// never leaves a wrong belief behind. Assigning a new reservation ends the held one first
// (cancel). Not thread-safe: one owner, the coroutine of one request (or of one save).
#pragma once

#include <optional>
#include <utility>

#include "routing/registry.hpp"

namespace warmslot::routing {

class reservation {
  public:
    reservation() = default;
    reservation(registry& reg, ticket t) : reg_(&reg), t_(std::move(t)) {}
    reservation(reservation&& o) noexcept
        : reg_(std::exchange(o.reg_, nullptr)),
          t_(std::move(o.t_)),
          sent_(o.sent_),
          preparing_(o.preparing_) {}
    reservation& operator=(reservation&& o) noexcept {
        if (this != &o) {
            cancel();
            reg_ = std::exchange(o.reg_, nullptr);
            t_ = std::move(o.t_);
            sent_ = o.sent_;
            preparing_ = o.preparing_;
        }
        return *this;
    }
    reservation(const reservation&) = delete;
    reservation& operator=(const reservation&) = delete;
    ~reservation() { cancel(); }

    ticket& operator*() { return t_; }
    const ticket& operator*() const { return t_; }
    ticket* operator->() { return &t_; }
    const ticket* operator->() const { return &t_; }
    bool open() const { return reg_ != nullptr; }

    // Work on the slot before its request (restore, priming, save) begins (true) or is over
    // (false): requests sent without id_slot to its backend wait meanwhile
    // (registry::set_preparing). It is over at the latest when the reservation ends.
    void preparing(bool on) {
        if (reg_ && preparing_ != on) reg_->set_preparing(t_, on);
        preparing_ = on && reg_ != nullptr;
    }
    // The request is about to be written to the slot: from now on, end() forgets what it holds.
    void sent() { sent_ = true; }

    void complete(const fingerprint* fp, const std::optional<api::prompt_stats>& s,
                  clock::time_point now) {
        if (auto* r = std::exchange(reg_, nullptr)) r->complete(t_, fp, s, now);
    }
    void release() noexcept {
        if (auto* r = std::exchange(reg_, nullptr)) r->release(t_);
    }
    void cancel() noexcept {
        if (auto* r = std::exchange(reg_, nullptr)) r->cancel(t_);
    }
    void end() noexcept {
        if (sent_)
            cancel();
        else
            release();
    }

  private:
    registry* reg_ = nullptr;
    ticket t_;
    bool sent_ = false;
    bool preparing_ = false;
};

}  // namespace warmslot::routing
