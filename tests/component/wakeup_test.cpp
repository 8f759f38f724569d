// Waiting for a busy slot: the waiter is woken by the registry when the slot is released (from
// another thread, as a request on another worker would), and gives up at its deadline.
#include "service/wakeup.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "net/beast.hpp"
#include "routing/registry.hpp"

namespace warmslot {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

struct one_slot {
    routing::registry reg{{"b"}, routing::planner_settings{}};
    std::shared_ptr<service::wakeup_hub> hub = std::make_shared<service::wakeup_hub>();
    std::optional<routing::ticket> holder;
    one_slot() {
        routing::backend_info info;
        info.total_slots = 1;
        info.model_path = "m.gguf";
        reg.set_info(0, info, true);
        reg.set_healthy(0, true);
        reg.set_listener([h = hub] { h->notify(); });
        holder = reg.reserve_idle(0, 1).at(0);
    }
    ~one_slot() { reg.set_listener(nullptr); }
};

// Runs a waiter for the held slot on its own io_context thread; returns whether it took the
// slot and how long it waited.
std::pair<bool, clock::duration> wait_for(one_slot& s, clock::duration limit,
                                          const std::function<void()>& meanwhile) {
    net::io_context io;
    bool took = false;
    clock::duration waited{};
    routing::ticket wanted = *s.holder;  // the same slot, as a wait_hit plan names it
    wanted.id = 0;
    int tries = 0;
    net::co_spawn(
        io,
        [&]() -> awaitable<void> {
            const auto start = clock::now();
            took = co_await service::wait_until(
                *s.hub,
                [&] {
                    ++tries;
                    return s.reg.try_take(wanted, clock::now());
                },
                start + limit);
            waited = clock::now() - start;
        },
        net::detached);
    std::thread runner([&] { io.run(); });
    meanwhile();
    runner.join();
    if (took) s.reg.release(wanted);
    CHECK(tries < 20);  // woken, not polling
    return {took, waited};
}

TEST_CASE("a waiter for a busy slot wakes when it is released, not at its deadline") {
    one_slot s;
    const auto [took, waited] = wait_for(s, 60s, [&] {
        std::this_thread::sleep_for(50ms);  // the other request runs a while
        s.reg.release(*s.holder);
    });
    CHECK(took);          // only possible after the release: the slot was held until then
    CHECK(waited < 30s);  // far from the deadline, even on a loaded machine
}

TEST_CASE("a waiter whose slot stays busy gives up at its deadline") {
    one_slot s;
    const auto [took, waited] = wait_for(s, 200ms, [] {});
    CHECK_FALSE(took);
    CHECK(waited >= 200ms);
    s.reg.release(*s.holder);
}

TEST_CASE("a release before the waiter sleeps is not lost") {
    one_slot s;
    service::wakeup_hub::waiter w(*s.hub, net::system_executor());
    s.hub->notify();  // while registered but not waiting yet
    net::io_context io;
    bool woken = false;
    net::co_spawn(
        io, [&]() -> awaitable<void> { woken = co_await w.wait(clock::now() + 60s); },
        net::detached);
    io.run();
    CHECK(woken);
    s.reg.release(*s.holder);
}

}  // namespace
}  // namespace warmslot
