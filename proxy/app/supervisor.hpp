// Supervised backends: the llama-server processes of `command:` backends. Starts them (at
// start-up, or on the first request that needs them), restarts them with backoff when they
// die, stops them when idle, retired by a reload, or at shutdown, each time saving their
// valuable slots first.
//
// Processes are started, polled and stopped only on the supervisor's own executor (a thread
// that is not an I/O worker: terminate() blocks). wake() and used() may be called from any
// worker; they only set flags and read the registry.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "app/process.hpp"
#include "app/supervised_argv.hpp"
#include "config/source.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"

namespace warmslot::app {

// Gives every supervised backend of `cfg` without an address a free loopback port.
void assign_ports(config::config& cfg);

class supervisor final : public service::starter {
public:
    // Saves a backend's valuable slots before it stops (the disk tier); may be empty.
    using save_fn = std::function<awaitable<void>(int backend)>;

    supervisor(const config::source& src, routing::registry& reg, net::any_io_executor ex,
               save_fn save);
    ~supervisor() override;

    // Starts the loop; after a reload, call sync() so new backends start and retired ones stop.
    void start();
    void sync();
    // Saves and stops every process (graceful stop). Run on the supervisor's executor.
    awaitable<void> stop_all();

    // service::starter
    awaitable<void> wake(const config::config& cfg, std::string model) override;
    void used(int backend) override;

private:
    struct child;
    awaitable<void> loop();
    void tick(const config::config& cfg, routing::clock::time_point now);
    void launch(int index, const config::backend& b, child& c);
    awaitable<void> save_and_stop(int backend, const char* why);
    child& child_of(std::size_t backend);  // under mu_

    const config::source& src_;
    routing::registry& reg_;
    net::any_io_executor ex_;
    save_fn save_;
    bool stopping_ = false;  // on ex_ only
    std::mutex mu_;          // children_'s flags (wanted, last use) for wake() and used()
    std::vector<std::unique_ptr<child>> children_;  // by backend index
};

}  // namespace warmslot::app
