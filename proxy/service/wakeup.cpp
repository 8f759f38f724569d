#include "service/wakeup.hpp"

#include <algorithm>
#include <atomic>

namespace warmslot::service {
namespace {
constexpr std::chrono::milliseconds give_up_every{250};
}  // namespace

struct wakeup_hub::waiter::state {
    explicit state(net::any_io_executor ex) : executor(ex), timer(ex) {}
    net::any_io_executor executor;
    net::steady_timer timer;
    std::atomic<bool> signalled{false};
};

void wakeup_hub::notify() {
    std::lock_guard lock(mu_);
    for (const auto& s : waiters_) {
        s->signalled.store(true, std::memory_order_release);
        // The posted handler keeps the state (and its timer) alive until it ran.
        net::post(s->executor, [s] { s->timer.cancel(); });
    }
}

wakeup_hub::waiter::waiter(wakeup_hub& hub, net::any_io_executor ex)
    : hub_(hub), s_(std::make_shared<state>(std::move(ex))) {
    std::lock_guard lock(hub_.mu_);
    hub_.waiters_.push_back(s_);
}

wakeup_hub::waiter::~waiter() {
    std::lock_guard lock(hub_.mu_);
    auto& list = hub_.waiters_;
    list.erase(std::remove(list.begin(), list.end(), s_), list.end());
}

awaitable<bool> wakeup_hub::waiter::wait(std::chrono::steady_clock::time_point deadline) {
    if (s_->signalled.exchange(false, std::memory_order_acq_rel)) co_return true;
    s_->timer.expires_at(deadline);
    auto [ec] = co_await s_->timer.async_wait(nothrow);
    s_->signalled.store(false, std::memory_order_release);
    co_return ec == net::error::operation_aborted;
}

awaitable<bool> wait_until(wakeup_hub& hub, std::function<bool()> ready,
                           std::chrono::steady_clock::time_point deadline,
                           std::function<bool()> give_up) {
    wakeup_hub::waiter w(hub, co_await net::this_coro::executor);
    while (true) {
        if (ready()) co_return true;
        if ((give_up && give_up()) || std::chrono::steady_clock::now() >= deadline) co_return false;
        co_await w.wait(std::min(deadline, std::chrono::steady_clock::now() + give_up_every));
    }
}

}  // namespace warmslot::service
