// Windows implementation of signals.hpp. The C runtime turns Ctrl-C into SIGINT and Ctrl-Break
// into SIGBREAK; SIGTERM only comes from raise() in this process. (The service stop control
// calls app::request_stop() instead, service_windows.cpp.)
#include <csignal>

#include "app/signals.hpp"

namespace warmslot::app {

std::vector<int> stop_signals() { return {SIGINT, SIGBREAK, SIGTERM}; }

std::optional<int> reload_signal() { return std::nullopt; }

}  // namespace warmslot::app
