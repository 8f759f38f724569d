// Child processes: start a program from an argv list, watch it, stop it. Platform seam: the
// interface knows nothing of POSIX; process_posix.cpp implements it with posix_spawn and process
// groups, process_windows.cpp with CreateProcessW and a job object. No Asio.
//
// A `process` object is used from one thread at a time (the supervisor's); it is not
// thread-safe. terminate() blocks for up to its grace period, so never call it on an I/O thread.
// The caller must not set SIGCHLD to SIG_IGN (children would be reaped behind poll()'s back).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace warmslot::app {

// How a child ended.
struct exit_status {
    bool exited = false;  // true: it called exit(); false: a signal ended it
    int code = 0;         // exit code when `exited`
    int signal = 0;       // the signal number otherwise
                          // (exited with code -1: someone else reaped it, the end is unknown)

    // "exited with code 3", "killed by signal 9 (Killed)".
    std::string describe() const;
};

struct process_options {
    std::vector<std::string> argv;  // program first; a name without '/' is looked up in PATH
    std::string log_path;           // stdout and stderr are appended to this file (created if
                                    // missing; its directory must exist); "" = inherit ours
    // A warmslot binary that starts the program through `exec-child` (see exec_child), so that
    // on Linux the kernel stops the child when the process that started it dies, even by
    // SIGKILL. "" = start the program directly. Ignored on Windows, where a job object does it.
    std::string guard = {};
    // The child's environment as NAME=value entries; std::nullopt = a copy of warmslot's.
    std::optional<std::vector<std::string>> env = std::nullopt;
};

// One started child. It leads its own process group, so terminate() also reaches the processes
// it started. stdin is /dev/null; it inherits warmslot's working directory, and its environment
// unless `env` is given, and no other open files. Destroying a process that is still running kills
// its group with SIGKILL and reaps it: call terminate() first for a graceful stop.
class process {
  public:
    virtual ~process() = default;

    virtual std::int64_t pid() const noexcept = 0;

    // Non-blocking: std::nullopt while it runs, then (on every later call too) how it ended.
    virtual std::optional<exit_status> poll() = 0;

    // Asks the group to stop (SIGTERM), waits up to `grace` for the child to exit, then kills
    // the group (SIGKILL) and reaps the child. Returns how it ended; returns at once when it
    // already had. Blocking.
    virtual exit_status terminate(std::chrono::milliseconds grace) = 0;
};

// Starts the program. Throws std::system_error when it cannot be started (missing program, no
// permission, unwritable log file); the message names the program.
std::unique_ptr<process> start_process(const process_options& options);

// warmslot's own environment as NAME=value entries (UTF-8 on Windows).
std::vector<std::string> current_environment();
// Whether variable names compare ignoring case (Windows) or not (POSIX).
bool env_names_ignore_case();

// The guard to put in process_options for children that must not outlive this process: this
// very executable on Linux, "" elsewhere.
std::string self_guard();

// `warmslot exec-child PARENT_PID -- PROGRAM [ARG...]`, the guard's side: asks the kernel to
// send SIGTERM when its parent dies (Linux; the parent is the thread that started it, which must
// live as long as the child should), gives up if the parent is already gone, then replaces
// itself with the program. Returns only on failure (exit code 2 for bad arguments, 127 when the
// program cannot be started).
int exec_child(const std::vector<std::string>& args);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released). Another
// process may take it before the caller uses it, so callers retry on "address in use".
// Throws std::system_error.
std::uint16_t pick_free_loopback_port();

// A new directory only this process's user can enter (mode 0700, made by mkdtemp under $TMPDIR
// or /tmp), for the UNIX sockets of the llama-servers warmslot starts: no other local user can
// bind a socket there, or connect to one. "" where supervised backends listen on loopback ports
// instead (Windows). Throws std::system_error.
std::string make_private_dir();
// Whether `dir` is still a directory (not a link) owned by this process's user that no one
// else may enter; `why` says what is wrong otherwise.
bool is_private_dir(const std::string& dir, std::string& why);
// Deletes `path` when it is there (the socket file a stopped llama-server leaves behind, which
// would keep the next one from binding). Errors are ignored.
void remove_file(const std::string& path);
// Deletes what make_private_dir made: the files in it, then the directory. Errors are ignored.
void remove_private_dir(const std::string& dir);

}  // namespace warmslot::app
