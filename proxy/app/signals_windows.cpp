// Windows implementation of signals.hpp. The C runtime turns Ctrl-C into SIGINT and Ctrl-Break
// into SIGBREAK; SIGTERM is only ever raised by this process (the service stop control).
#include <csignal>

#include "app/signals.hpp"

namespace warmslot::app {

std::vector<int> stop_signals() { return {SIGINT, SIGBREAK, SIGTERM}; }

std::optional<int> reload_signal() { return std::nullopt; }

}  // namespace warmslot::app
