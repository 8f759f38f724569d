// The command line of a backend warmslot starts: the user's command plus the flags warmslot
// needs. Pure; tested as a table.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace warmslot::app {

// `b.command` plus --host 127.0.0.1, --port b.port, --slot-save-path b.slot_save_path (when
// set), --metrics and -np 4 unless the command already has them.
std::vector<std::string> supervised_argv(const config::backend& b);

}  // namespace warmslot::app
