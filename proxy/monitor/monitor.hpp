// Watches every backend: what it is (GET /props, /v1/models, /lora-adapters), whether its slot
// contents are stable enough to pin (a probe at start, after a restart and after an identity
// change), and what its slots hold (GET /slots, compared with the registry's beliefs). Feeds
// the registry. A request that sees a sign of a restart asks for a check at once
// (registry::want_check, which calls check_now) and waits for it.
//
// Runs one coroutine per backend on one worker (its own pool); check_now() and stop() are
// thread-safe. An answer it cannot read (a field of the wrong type) is logged, the backend is
// marked unhealthy until it answers properly, and polling goes on.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/model_identity.hpp"
#include "config/config.hpp"
#include "config/source.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "upstream/pool.hpp"

namespace warmslot::monitoring {

class monitor {
  public:
    monitor(const config::source& src, routing::registry& reg, net::any_io_executor ex);
    ~monitor();
    // Starts watching every backend of the current config that is not watched yet; a watch
    // ends when its backend is retired. start() at start-up, again after each reload.
    void start();
    void stop();
    // Checks `backend` as soon as the check under way (if any) is over.
    void check_now(int backend);
    // Called on the monitor's worker when a backend that sleeps (--sleep-idle-seconds) has been
    // quiet for half its sleep time, once per quiet period: its valuable slots are worth saving
    // before it sleeps. Set before start().
    using quiet_fn = std::function<void(int backend)>;
    void on_quiet(quiet_fn f) { on_quiet_ = std::move(f); }

  private:
    // Per backend; only touched on ex_.
    struct watch_state {
        bool watching = false;
        bool warned = false;          // the unstable-slots warning was logged
        bool unreadable = false;      // an unreadable answer was logged (until a good one)
        bool impostor = false;        // another process on a supervised port was logged
        bool down = true;             // not seen answering since start or since it failed:
                                      // everything is read afresh when it answers
        bool probe_pending = true;    // slot stability still to be probed
        bool pinning = false;         // what the last probe found
        bool requested = false;       // a check was asked for while one ran
        std::string base;             // identity without what /v1/models and adapters add
        std::string identity;         // the last full identity
        std::int64_t last_task = -1;  // highest task id its slots showed (routing::latest_task)
        net::steady_timer* timer = nullptr;  // the watch's pause, while it waits
        // A backend that sleeps (monitor/monitor_sleep.cpp):
        bool asleep = false;          // /props said so at the last check
        bool metrics_warned = false;  // its /metrics did not answer (logged once)
        bool saved_quiet = false;     // on_quiet was called in this quiet period
        std::string activity;         // what /metrics said had run, at the last change
        std::chrono::steady_clock::time_point quiet_since;
        bool unlisted = false;  // a router's model its GET /models did not list (logged once)
        upstream::connection* sentinel = nullptr;  // the watch connection, while it is open
    };
    awaitable<void> watch(std::size_t backend);
    // A connection that sends nothing, open while the backend is up: its process closes it the
    // moment it ends (a restart, a crash), and the backend is then checked at once.
    awaitable<void> sentinel(std::size_t backend);
    awaitable<void> refresh(std::size_t backend);  // one check; never throws
    awaitable<bool> look(std::size_t backend);
    awaitable<bool> own_process(config::backend b, watch_state& st);
    awaitable<void> read_identity(const config::backend& b, std::size_t backend,
                                  routing::backend_info& info, const std::string& alias,
                                  const std::string& stamp, const std::string& flags,
                                  const std::string& env);
    awaitable<std::optional<bool>> probe_stable_slots(config::backend b, std::size_t backend,
                                                      int total_slots);
    // `gone` (may be null): set when it did not answer, or answered 503 (a model loading).
    awaitable<std::optional<std::vector<routing::observed_slot>>> read_slots(config::backend b,
                                                                             bool* gone = nullptr);
    // For a backend that sleeps: whether this check leaves its slots unread (it sleeps, or
    // nothing ran there since the last check), keeping track of how long it has been quiet.
    awaitable<bool> let_sleep(config::backend b, std::size_t backend, bool sleeping);
    // A router's model that the router has not loaded (monitor/monitor_sleep.cpp).
    awaitable<bool> router_unloaded(config::backend b, std::size_t backend);
    // What the router's GET /models says of the model: "loaded", "loading", "unloaded",
    // "sleeping", ...; "" when it does not list the model; std::nullopt without an answer.
    awaitable<std::optional<std::string>> router_state(config::backend b);
    static std::chrono::milliseconds sleep_after(const config::backend& b);
    // The model's stamp for routing::identity_of, and what its file says of its architecture
    // (empty when unread).
    awaitable<std::pair<std::string, cache::model_facts>> model_stamp(std::string path);
    void unreadable(const config::backend& b, watch_state& st, const char* what);
    void start_watches();  // on ex_

    const config::source& src_;
    routing::registry& reg_;
    net::any_io_executor ex_;
    upstream::pool pool_;
    cache::model_ids model_ids_;  // used on hasher_ only
    net::thread_pool hasher_{1};  // reads model files (blocking) off the I/O threads
    std::atomic<bool> stopping_{false};
    std::vector<std::unique_ptr<watch_state>> state_;  // by backend index
    quiet_fn on_quiet_;
};

}  // namespace warmslot::monitoring
