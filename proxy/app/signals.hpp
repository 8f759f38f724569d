// The signals that stop warmslot gracefully and the one that reloads its config. Platform seam:
// POSIX stops on SIGINT and SIGTERM and reloads on SIGHUP; Windows stops on SIGINT (Ctrl-C),
// SIGBREAK (Ctrl-Break) and SIGTERM (raise() only) and has no reload signal: there the config
// file watcher reloads. A service stop control calls app::request_stop() (app.hpp). No Asio.
#pragma once

#include <optional>
#include <vector>

namespace warmslot::app {

std::vector<int> stop_signals();
std::optional<int> reload_signal();

}  // namespace warmslot::app
