// The process: logging, worker threads, signals, config reloads, the server, and an orderly
// stop.
#pragma once

#include <string>

#include "config/config.hpp"

namespace warmslot::app {

struct run_options {
    std::string log_file;  // also log to this file, rotated at 10 MiB, 5 kept ("" = stderr only)
};

// Serves until a stop signal (signals.hpp: SIGINT, SIGTERM, ...), then stops within the
// configured grace period. `path` is the config file `cfg` was read from: SIGHUP (where there
// is one) and the file watcher reload it. Returns the process exit code. Throws on start-up
// failures (bad listen address, ...).
int run(const std::string& path, config::config cfg, const run_options& options = {});

}  // namespace warmslot::app
