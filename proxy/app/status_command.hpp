// `warmslot status`: asks a running warmslot for GET /warmslot/status and prints it as tables
// (or as the JSON itself with --json). A short-lived client, not the server.
#pragma once

#include <string>
#include <vector>

namespace warmslot::app {

// `args` are the arguments after "status". Returns the exit code: 0 when warmslot answered,
// 1 when it refused or could not be reached (message on stderr), 2 for a bad command line.
int status_command(const std::vector<std::string>& args);

}  // namespace warmslot::app
