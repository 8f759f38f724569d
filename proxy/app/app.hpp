// The process: logging, worker threads, signals, config reloads, the server, and an orderly
// stop.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "routing/planner.hpp"

namespace warmslot::app {

struct run_options {
    std::string log_file;  // also log to this file, rotated at 10 MiB, 5 kept ("" = stderr only)
    // Log to stderr and print the "warmslot listening on URL" line on stdout. A Windows service
    // has no console: its log file is its only output.
    bool console = true;
    // Called once, when warmslot listens and stop requests are honoured (the Windows service
    // reports RUNNING here; systemd is notified at the same point).
    std::function<void()> on_ready;
};

// Serves until a stop signal (signals.hpp: SIGINT, SIGTERM, ...), then stops within the
// configured grace period. `path` is the config file `cfg` was read from: SIGHUP (where there
// is one) and the file watcher reload it. Returns the process exit code. Throws on start-up
// failures (bad listen address, ...).
int run(const std::string& path, config::config cfg, const run_options& options = {});

// Asks run() to stop gracefully, like a stop signal; safe from any thread. A request that comes
// while no run() is ready (a service stop control during start-up) is remembered, and the next
// run() honours it as soon as it is ready.
void request_stop();

// What the registry is given of a config, at start-up and after each reload: its backends'
// names, and the planner's settings from `routing:`.
std::vector<std::string> backend_names(const config::config& cfg);
routing::planner_settings planner_settings(const config::routing_settings& r);

}  // namespace warmslot::app
