// The process: logging, worker threads, signals, the server, and an orderly stop.
#pragma once

#include "config/config.hpp"

namespace warmslot::app {

// Serves until SIGINT or SIGTERM, then stops within the configured grace period.
// Returns the process exit code. Throws on start-up failures (bad listen address, ...).
int run(const config::config& cfg);

}  // namespace warmslot::app
