// POSIX implementation of signals.hpp.
#include <csignal>

#include "app/signals.hpp"

namespace warmslot::app {

std::vector<int> stop_signals() { return {SIGINT, SIGTERM}; }

std::optional<int> reload_signal() { return SIGHUP; }

}  // namespace warmslot::app
