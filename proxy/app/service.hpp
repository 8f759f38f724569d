// `warmslot service ...`: running as a Windows service. Platform seam: service_windows.cpp talks
// to the Service Control Manager; service_posix.cpp only explains that systemd does this job
// there (deploy/systemd).
//
//   warmslot service install [--config FILE] [--log FILE]   register (auto start, LocalSystem,
//                                                            restart on failure) and the event
//                                                            log source
//   warmslot service uninstall | start | stop
//   warmslot service run [--config FILE] [--log FILE]       what the SCM starts: ServiceMain
//
// Defaults: %ProgramData%\warmslot\warmslot.yaml and %ProgramData%\warmslot\logs\warmslot.log.
// The service reports RUNNING once warmslot listens. Its stop and shutdown controls call
// app::request_stop(): the same graceful stop as SIGTERM on Linux, remembered when it comes
// during start-up. The service logs only to its log file (it has no console).
#pragma once

#include <string>
#include <vector>

namespace warmslot::app {

// `args` are the arguments after "service". Returns the exit code (2: bad command line).
int service_command(const std::vector<std::string>& args);

}  // namespace warmslot::app
