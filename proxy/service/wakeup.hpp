// Wakes coroutines that wait for the registry to change (a slot released, a backend checked),
// instead of having them poll.
//
// One hub per process, shared by all workers: notify() is thread-safe and may be called from
// any thread (it is the registry's listener). A waiter belongs to one coroutine on one executor;
// the hub wakes it by posting the cancellation of its timer to that executor, so the timer is
// only ever touched on its own thread. Wake-ups may be spurious: a waiter re-tests its condition.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "net/beast.hpp"

namespace warmslot::service {

class wakeup_hub {
  public:
    // Wakes every waiter now registered.
    void notify();

    // Registered for its lifetime (RAII): a notify() between two waits is not lost.
    class waiter {
      public:
        waiter(wakeup_hub& hub, net::any_io_executor ex);
        ~waiter();
        waiter(const waiter&) = delete;
        waiter& operator=(const waiter&) = delete;
        // Returns when notified (true) or at `deadline` (false).
        awaitable<bool> wait(std::chrono::steady_clock::time_point deadline);
        struct state;  // shared with the hub's posted wake-ups

      private:
        wakeup_hub& hub_;
        std::shared_ptr<state> s_;
    };

  private:
    std::mutex mu_;
    std::vector<std::shared_ptr<waiter::state>> waiters_;
};

// Waits until `ready()` is true (tested at once and after every wake-up), `deadline` passes, or
// `give_up()` is true (tested at least every 250 ms: a client that left wakes no one). Returns
// ready()'s last answer. Runs on the calling coroutine's executor.
awaitable<bool> wait_until(wakeup_hub& hub, std::function<bool()> ready,
                           std::chrono::steady_clock::time_point deadline,
                           std::function<bool()> give_up = nullptr);

}  // namespace warmslot::service
