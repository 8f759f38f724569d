// Requests held for a slot: one that finds every slot of its backend taken waits here rather than
// in llama-server's queue, where it would take the first slot to free up as soon as the answer
// running there ends, before warmslot saves what that slot holds (a conversation file after the
// answer) and without a restore of its own prefix. Held, it is planned again once a slot is
// free: its own prefix when that one is free, else a victim whose content is on disk and its own
// file restored there; or, while a request llama-server places itself runs there and is not yet
// seen on its planned slot (pipeline::settle_floating), unpinned onto the free slot, as before.
// First come, first planned, per backend; at most routing.max_wait. Only a request that would
// have waited in llama-server's queue waits: a free slot is used at once, so requests run side
// by side as they would straight.

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "routing/reservation.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "service/wakeup.hpp"

namespace warmslot::service {

struct hold_line {
    std::mutex mu;
    std::uint64_t next = 0;
    std::map<int, std::deque<std::uint64_t>> waiting;  // backend -> places, oldest first
};

std::shared_ptr<hold_line> make_hold_line() { return std::make_shared<hold_line>(); }

std::size_t held_for(hold_line& line, int backend) {
    std::lock_guard lock(line.mu);
    const auto it = line.waiting.find(backend);
    return it == line.waiting.end() ? 0 : it->second.size();
}

namespace {
using routing::clock;

// One request's place in its backend's line, for the length of its wait.
class place {
  public:
    place(hold_line& line, wakeup_hub& hub, int backend)
        : line_(line), hub_(hub), backend_(backend) {
        std::lock_guard lock(line_.mu);
        id_ = ++line_.next;
        line_.waiting[backend_].push_back(id_);
    }
    // Leaving lets the next one in line look at the slots.
    ~place() {
        {
            std::lock_guard lock(line_.mu);
            auto& q = line_.waiting[backend_];
            q.erase(std::remove(q.begin(), q.end(), id_), q.end());
            if (q.empty()) line_.waiting.erase(backend_);
        }
        hub_.notify();
    }
    place(const place&) = delete;
    place& operator=(const place&) = delete;
    bool first() const {
        std::lock_guard lock(line_.mu);
        const auto it = line_.waiting.find(backend_);
        return it != line_.waiting.end() && !it->second.empty() && it->second.front() == id_;
    }

  private:
    hold_line& line_;
    wakeup_hub& hub_;
    int backend_;
    std::uint64_t id_ = 0;
};
}  // namespace

awaitable<bool> pipeline::wait_for_idle(const config::config& cfg, routing::reservation& t,
                                        const std::function<routing::ticket()>& plan_again,
                                        forward_state& st) {
    const auto deadline = clock::now() + cfg.routing.max_wait;
    const std::size_t known = cfg.backends.size();
    const place mine(*holds_, *wakeups_, t->p.backend);
    const auto gone = [&st] { return st.client_gone; };
    // Bounded: each round waits for a change in the slots, and the deadline ends them all.
    for (int round = 0; round < 100'000 && t->p.backend >= 0 && !t->p.slot; ++round) {
        t.cancel();  // nothing was sent for it
        const bool idle = co_await wait_until(
            *wakeups_, [&] { return mine.first() && reg_.has_idle_slot(known); }, deadline, gone);
        if (st.client_gone) co_return false;
        t = routing::reservation(reg_, plan_again());
        if (!idle) break;
        if (t->p.backend >= 0 && !t->p.slot) {
            // An idle slot this request cannot take (another model's backend, or one taken
            // meanwhile): the next change, rather than at once.
            wakeup_hub::waiter w(*wakeups_, co_await net::this_coro::executor);
            co_await w.wait(std::min(deadline, clock::now() + std::chrono::milliseconds(250)));
        }
    }
    co_return t->p.backend < 0 || t->p.slot.has_value();
}

awaitable<void> pipeline::hold_for_slot(const config::config& cfg, upstream::pool& pool,
                                        routing::reservation& t,
                                        const std::function<routing::ticket()>& plan_again,
                                        forward_state& st) {
    const int backend = t->p.backend;
    t.cancel();  // nothing was sent for it; its unpinned count would take a slot of its own
    // Its place in line is kept until it is planned again: the next one sees the slot it takes.
    std::optional<place> mine;
    if (!reg_.has_free_slot(backend)) {
        const auto deadline = clock::now() + cfg.routing.max_wait;
        mine.emplace(*holds_, *wakeups_, backend);
        co_await wait_until(
            *wakeups_, [&] { return mine->first() && reg_.has_free_slot(backend); }, deadline,
            [&st] { return st.client_gone; });
        if (st.client_gone) co_return;
    }
    co_await settle_floating(cfg, pool, st);
    if (st.client_gone) co_return;
    t = routing::reservation(reg_, plan_again());
}

}  // namespace warmslot::service
