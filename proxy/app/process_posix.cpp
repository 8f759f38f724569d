// POSIX implementation of process.hpp: posix_spawn into a new process group.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "app/process.hpp"

extern char** environ;

namespace warmslot::app {
namespace {

std::system_error os_error(int error, const std::string& what) {
    return std::system_error(error, std::generic_category(), what);
}

exit_status decode(int wait_status) {
    exit_status out;
    if (WIFEXITED(wait_status)) {
        out.exited = true;
        out.code = WEXITSTATUS(wait_status);
    } else if (WIFSIGNALED(wait_status)) {
        out.signal = WTERMSIG(wait_status);
    }
    return out;
}

// Owns posix_spawn's attribute and file-action objects for one call.
class spawn_setup {
  public:
    explicit spawn_setup(const process_options& options) {
        ::posix_spawnattr_init(&attr_);
        ::posix_spawn_file_actions_init(&actions_);
        // A new process group (so the whole tree can be signalled), default dispositions for
        // the signals a server commonly ignores or handles, and no blocked signals.
        sigset_t none;
        sigset_t defaults;
        sigemptyset(&none);
        sigemptyset(&defaults);
        for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2})
            sigaddset(&defaults, sig);
        ::posix_spawnattr_setflags(
            &attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        ::posix_spawnattr_setpgroup(&attr_, 0);
        ::posix_spawnattr_setsigmask(&attr_, &none);
        ::posix_spawnattr_setsigdefault(&attr_, &defaults);
        ::posix_spawn_file_actions_addopen(&actions_, 0, "/dev/null", O_RDONLY, 0);
        if (!options.log_path.empty()) {
            ::posix_spawn_file_actions_addopen(&actions_, 1, options.log_path.c_str(),
                                               O_WRONLY | O_CREAT | O_APPEND, 0640);
            ::posix_spawn_file_actions_adddup2(&actions_, 1, 2);
        }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
        // Sockets and files of the proxy that lack O_CLOEXEC must not leak into llama-server.
        ::posix_spawn_file_actions_addclosefrom_np(&actions_, 3);
#endif
    }
    ~spawn_setup() {
        ::posix_spawn_file_actions_destroy(&actions_);
        ::posix_spawnattr_destroy(&attr_);
    }
    spawn_setup(const spawn_setup&) = delete;
    spawn_setup& operator=(const spawn_setup&) = delete;

    const posix_spawnattr_t* attr() const { return &attr_; }
    const posix_spawn_file_actions_t* actions() const { return &actions_; }

  private:
    posix_spawnattr_t attr_{};
    posix_spawn_file_actions_t actions_{};
};

class posix_process final : public process {
  public:
    explicit posix_process(pid_t pid) : pid_(pid) {}
    posix_process(const posix_process&) = delete;
    posix_process& operator=(const posix_process&) = delete;

    ~posix_process() override {
        if (status_) return;
        ::kill(-pid_, SIGKILL);
        reap(0);
    }

    std::int64_t pid() const noexcept override { return pid_; }

    std::optional<exit_status> poll() override {
        if (!status_) reap(WNOHANG);
        return status_;
    }

    exit_status terminate(std::chrono::milliseconds grace) override {
        if (poll()) return *status_;
        ::kill(-pid_, SIGTERM);
        const auto deadline = std::chrono::steady_clock::now() + grace;
        while (!poll() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        // Also reaches what the child started and left behind. The group id stays reserved
        // while any member lives, so this cannot hit an unrelated process.
        ::kill(-pid_, SIGKILL);
        if (!status_) reap(0);
        return *status_;
    }

  private:
    void reap(int flags) {
        int wait_status = 0;
        pid_t r = 0;
        do {
            r = ::waitpid(pid_, &wait_status, flags);
        } while (r < 0 && errno == EINTR);
        if (r == pid_) {
            status_ = decode(wait_status);
        } else if (r < 0) {
            status_ = exit_status{};  // ECHILD: reaped elsewhere; how it ended is unknown
            status_->code = -1;
            status_->exited = true;
        }
    }

    pid_t pid_;
    std::optional<exit_status> status_;
};

}  // namespace

std::string exit_status::describe() const {
    if (exited) return "exited with code " + std::to_string(code);
    return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

namespace {

// The PATH the child will search: from its own environment when it is given one.
std::string child_path(const process_options& options) {
    if (options.env) {
        for (const std::string& entry : *options.env) {
            if (entry.starts_with("PATH=")) return entry.substr(5);
        }
        return "/usr/local/bin:/usr/bin:/bin";
    }
    const char* path = std::getenv("PATH");
    return path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
}

// Whether execvp in the child would find `program`: a path as it is, a bare name in its PATH.
bool runnable(const std::string& program, const process_options& options) {
    if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
    const std::string dirs = child_path(options);
    for (std::size_t at = 0; at <= dirs.size();) {
        const std::size_t end = std::min(dirs.find(':', at), dirs.size());
        const std::string dir = end > at ? dirs.substr(at, end - at) : ".";
        if (::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
        at = end + 1;
    }
    return false;
}

// The argv posix_spawn gets: the program's, or the guard's wrapped around it.
std::vector<std::string> spawn_argv(const process_options& options) {
    if (options.guard.empty()) return options.argv;
    // Through the guard, a missing program would only show as exit code 127 later: say it now.
    if (!runnable(options.argv.front(), options))
        throw os_error(ENOENT, "cannot start " + options.argv.front());
    std::vector<std::string> out = {options.guard, "exec-child", std::to_string(::getpid()), "--"};
    out.insert(out.end(), options.argv.begin(), options.argv.end());
    return out;
}

}  // namespace

std::unique_ptr<process> start_process(const process_options& options) {
    if (options.argv.empty() || options.argv.front().empty())
        throw os_error(EINVAL, "cannot start a process: empty command");
    const std::vector<std::string> args = spawn_argv(options);
    const std::string& program = args.front();
    if (!options.log_path.empty()) {
        // posix_spawn would report an unopenable log as a failure of the program; check first.
        const int fd =
            ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (fd < 0) throw os_error(errno, "cannot open log file " + options.log_path);
        ::close(fd);
    }
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    if (options.env) {
        for (const std::string& entry : *options.env)
            envp.push_back(const_cast<char*>(entry.c_str()));
        envp.push_back(nullptr);
    }
    const spawn_setup setup(options);
    pid_t pid = 0;
    const int error = ::posix_spawnp(&pid, program.c_str(), setup.actions(), setup.attr(),
                                     argv.data(), options.env ? envp.data() : environ);
    if (error != 0) throw os_error(error, "cannot start " + program);
    return std::make_unique<posix_process>(pid);
}

std::vector<std::string> current_environment() {
    std::vector<std::string> out;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
    return out;
}

bool env_names_ignore_case() { return false; }

std::string self_guard() {
#ifdef __linux__
    return "/proc/self/exe";
#else
    return "";
#endif
}

int exec_child(const std::vector<std::string>& args) {
    if (args.size() < 3 || args[1] != "--") {
        std::fputs("usage: warmslot exec-child PARENT_PID -- PROGRAM [ARG...]\n", stderr);
        return 2;
    }
    const long parent = std::strtol(args[0].c_str(), nullptr, 10);
#ifdef __linux__
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
        std::fprintf(stderr, "warmslot exec-child: prctl: %s\n", std::strerror(errno));
        return 127;
    }
#endif
    if (::getppid() != parent) return 127;  // it died before the request took effect
    std::vector<char*> argv;
    for (std::size_t i = 2; i < args.size(); ++i)
        argv.push_back(const_cast<char*>(args[i].c_str()));
    argv.push_back(nullptr);
    ::execvp(argv.front(), argv.data());
    std::fprintf(stderr, "warmslot exec-child: cannot start %s: %s\n", argv.front(),
                 std::strerror(errno));
    return 127;
}

std::uint16_t pick_free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw os_error(errno, "cannot create a socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        const int error = errno;
        ::close(fd);
        throw os_error(error, "cannot pick a free loopback port");
    }
    ::close(fd);
    return ntohs(addr.sin_port);
}

std::string make_private_dir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp && tmp[0] == '/' ? tmp : "/tmp";
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    std::string dir = base + "/warmslot-XXXXXX";
    // A socket's path must fit sockaddr_un with room for the file names warmslot gives.
    if (dir.size() + 16 >= sizeof(sockaddr_un{}.sun_path)) {
        throw os_error(ENAMETOOLONG, "the directory for the llama-servers' sockets under " + base +
                                         " would be too long for a socket path");
    }
    if (::mkdtemp(dir.data()) == nullptr)  // mode 0700, owned by this process's user
        throw os_error(errno, "cannot make a private directory under " + base);
    std::string why;
    if (!is_private_dir(dir, why)) {
        ::rmdir(dir.c_str());
        throw os_error(EPERM, dir + ": " + why);
    }
    return dir;
}

bool is_private_dir(const std::string& dir, std::string& why) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
        why = std::strerror(errno);
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        why = "not a directory";
        return false;
    }
    if (st.st_uid != ::geteuid()) {
        why = "owned by another user";
        return false;
    }
    if ((st.st_mode & 077) != 0) {
        why = "other users may enter it";
        return false;
    }
    return true;
}

void remove_file(const std::string& path) { ::unlink(path.c_str()); }

void remove_private_dir(const std::string& dir) {
    if (dir.empty()) return;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (const dirent* e = ::readdir(d)) {
            const std::string name = e->d_name;
            if (name != "." && name != "..") ::unlink((dir + "/" + name).c_str());
        }
        ::closedir(d);
    }
    ::rmdir(dir.c_str());
}

}  // namespace warmslot::app
