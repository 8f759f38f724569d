// `warmslot warm`: asks a running warmslot (POST /admin/warm) to prime and save a system prompt
// and documents ahead of time, and prints its report. A short-lived client, not the server.
#pragma once

#include <string>
#include <vector>

namespace warmslot::app {

// `args` are the arguments after "warm". Returns the exit code: 0 when the prefix is on disk,
// 1 when warmslot refused or failed (message on stderr), 2 for a bad command line.
int warm_command(const std::vector<std::string>& args);

}  // namespace warmslot::app
