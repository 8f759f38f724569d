// Watches every backend: what it is (GET /props, /v1/models), whether its slot contents are
// stable enough to pin (a probe at start and after a restart), and what its slots hold
// (GET /slots, compared with the registry's beliefs). Feeds the registry; never blocks requests.
//
// Runs one coroutine per backend on one worker (its own pool); stop() is thread-safe.
#pragma once

#include <atomic>
#include <memory>

#include "config/config.hpp"
#include "config/source.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "upstream/pool.hpp"

namespace warmslot::service {

class monitor {
public:
    monitor(const config::source& src, routing::registry& reg, net::any_io_executor ex);
    // Starts watching every backend of the current config that is not watched yet; a watch
    // ends when its backend is retired. start() at start-up, again after each reload.
    void start();
    void stop();

private:
    awaitable<void> watch(std::size_t backend);
    awaitable<bool> refresh(std::size_t backend);
    awaitable<bool> probe_stable_slots(config::backend b, std::size_t backend, int total_slots);
    awaitable<std::optional<std::vector<routing::observed_slot>>> read_slots(config::backend b);
    void start_watches();  // on ex_

    const config::source& src_;
    routing::registry& reg_;
    net::any_io_executor ex_;
    upstream::pool pool_;
    std::atomic<bool> stopping_{false};
    std::vector<std::string> identity_;  // per backend: model path + build + slots last seen
    std::vector<bool> warned_;
    std::vector<bool> watching_;
};

}  // namespace warmslot::service
