// Supervised backends: the llama-server processes of `command:` backends. Starts them (at
// start-up, or on the first request that needs them), restarts them with backoff when they
// die, stops them when idle, retired by a reload, or at shutdown, each time saving their
// valuable slots first.
//
// Swap groups (config `swap_groups`): members share a device; at most `max_running` of them
// (or a subset of one of the `allow` sets) have a process at once. A request for a stopped
// member waits in wake() (registered as a waiter, until its client leaves); each tick asks
// routing::swap::decide which member to drain and which to start, and
// a drained member's requests finish, its slots are saved and its process stops before the
// waiter's member starts. Requests admitted on a member hold a lease until they end, so a drain
// never stops a process under a request wake() let through.
//
// Processes are started, polled and stopped only on the supervisor's own executor (a thread
// that is not an I/O worker: terminate() blocks). wake() and used() may be called from any
// worker; they only set flags under mu_ and read the registry.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/tenant_limits.hpp"
#include "app/process.hpp"
#include "app/supervised_argv.hpp"
#include "config/source.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"

namespace warmslot::app {

// Gives every supervised backend of `cfg` without an address one, and a key holder: a UNIX
// socket in `socket_dir` (from make_private_dir), or a free loopback port when `socket_dir` is
// "" (Windows).
void assign_addresses(config::config& cfg, const std::string& socket_dir);

class supervisor final : public service::starter {
  public:
    // Saves a backend's valuable slots before it stops (the disk tier), charged to `charge_to`
    // when given (the tenant whose request made a swap stop it); may be empty.
    using save_fn =
        std::function<awaitable<void>(int backend, std::optional<std::string> charge_to)>;

    supervisor(const config::source& src, routing::registry& reg, net::any_io_executor ex,
               save_fn save);
    ~supervisor() override;

    // Starts the loop; after a reload, call sync() so new backends start and retired ones stop.
    void start();
    void sync();
    // Saves and stops every process (graceful stop). Run on the supervisor's executor.
    awaitable<void> stop_all();

    // service::starter
    awaitable<service::admission> wake(const config::config& cfg, std::string model,
                                       std::string tenant, std::function<bool()> gone) override;
    void used(int backend) override;
    // A restore loaded a file into `backend` in `seconds`: the first one after the backend was
    // started by its swap group is counted as the swap's restore phase. Any thread.
    void restored(int backend, double seconds);

    // What the status page and /metrics show of swap groups; thread-safe.
    struct member_view {
        std::string backend;
        std::string state;  // stopped, starting, running, draining
        std::size_t waiting = 0;
        bool home = false;
    };
    struct group_view {
        std::string name;
        std::size_t max_running = 1;
        std::vector<std::vector<std::string>> allow;  // the config's sets; empty: max_running
        std::vector<member_view> members;
    };
    struct swap_totals {
        std::uint64_t swaps = 0;  // members stopped to make room for another
        std::uint64_t failed_starts = 0;
        double drain_seconds = 0, save_seconds = 0, stop_seconds = 0, start_seconds = 0;
        double restore_seconds = 0;  // the first restore on a member after its start
    };
    std::vector<group_view> groups() const;
    swap_totals totals() const;
    std::string state_of(int backend) const override;
    nlohmann::json swap_status() const override;
    std::string swap_metrics() const override;

    struct child;  // one supervised backend (app/supervisor_child.hpp)

  private:
    using stop_list = std::vector<std::pair<int, std::string>>;
    awaitable<void> loop();
    void tick(const config::config& cfg, routing::clock::time_point now);
    void reap(const config::backend& b, int index, child& c, routing::clock::time_point now);
    // supervisor_groups.cpp, under mu_
    void tick_groups(const config::config& cfg, const std::vector<routing::backend_view>& views,
                     routing::clock::time_point now, stop_list& stops);
    std::optional<std::size_t> group_of(const config::config& cfg, const std::string& name) const;
    awaitable<service::admission> wake_group(const config::config& cfg,
                                             std::vector<std::size_t> candidates,
                                             std::string tenant, std::function<bool()> gone);
    void launch(int index, const config::backend& b, child& c);
    awaitable<void> save_and_stop(int backend, std::string why);
    child& child_of(std::size_t backend);                // under mu_
    const child* find_child(std::size_t backend) const;  // under mu_

    const config::source& src_;
    routing::registry& reg_;
    net::any_io_executor ex_;
    save_fn save_;
    bool stopping_ = false;  // on ex_ only
    mutable std::mutex mu_;  // children_'s flags and counts for wake(), used() and the views
    swap_totals totals_;     // under mu_
    std::vector<std::unique_ptr<child>> children_;  // by backend index
    api::tenant_limits swap_limits_;                // the swaps each tenant asked for (thread-safe)
};

}  // namespace warmslot::app
