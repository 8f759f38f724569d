// The process: logging, worker threads, signals, config reloads, the server, and an orderly
// stop.
#pragma once

#include <string>

#include "config/config.hpp"

namespace warmslot::app {

// Serves until SIGINT or SIGTERM, then stops within the configured grace period. `path` is the
// config file `cfg` was read from: SIGHUP reloads it. Returns the process exit code. Throws on
// start-up failures (bad listen address, ...).
int run(const std::string& path, config::config cfg);

}  // namespace warmslot::app
