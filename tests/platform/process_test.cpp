#include "app/process.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "helpers.hpp"

using namespace std::chrono_literals;
using warmslot::app::exit_status;
using warmslot::app::process;
using warmslot::app::start_process;
using warmslot::test::read_text;
using warmslot::test::temp_dir;
using warmslot::test::wait_until;

namespace {

exit_status wait_exit(process& p) {
    REQUIRE(wait_until([&] { return p.poll().has_value(); }, 10s));
    return *p.poll();
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Gone, or a zombie waiting for init: either way no longer running.
bool not_running(pid_t pid) {
    if (::kill(pid, 0) != 0) return true;
    const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

}  // namespace

TEST_CASE("process: exit code is reported, and again on later polls") {
    auto p = start_process({{"/bin/sh", "-c", "exit 3"}, ""});
    CHECK(p->pid() > 0);
    const exit_status s = wait_exit(*p);
    CHECK(s.exited);
    CHECK(s.code == 3);
    CHECK(s.describe() == "exited with code 3");
    CHECK(p->poll()->code == 3);
    CHECK(p->terminate(1s).code == 3);  // already ended: returns at once
}

TEST_CASE("process: terminate stops a running child with SIGTERM") {
    auto p = start_process({{"sleep", "30"}, ""});  // found through PATH
    CHECK_FALSE(p->poll().has_value());
    const auto started = std::chrono::steady_clock::now();
    const exit_status s = p->terminate(10s);
    CHECK(std::chrono::steady_clock::now() - started < 5s);
    CHECK_FALSE(s.exited);
    CHECK(s.signal == SIGTERM);
    CHECK(contains(s.describe(), "killed by signal 15"));
}

TEST_CASE("process: a child that ignores SIGTERM is killed after the grace") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    auto p = start_process(
        {{"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"}, log});
    REQUIRE(wait_until([&] { return contains(read_text(log), "ready"); }, 10s));
    const auto started = std::chrono::steady_clock::now();
    const exit_status s = p->terminate(300ms);
    CHECK(std::chrono::steady_clock::now() - started >= 300ms);
    CHECK_FALSE(s.exited);
    CHECK(s.signal == SIGKILL);
}

TEST_CASE("process: terminate reaches the whole process group") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    auto p = start_process({{"/bin/sh", "-c", "sleep 30 & echo $!; wait"}, log});
    REQUIRE(wait_until([&] { return contains(read_text(log), "\n"); }, 10s));
    const pid_t grandchild = std::stoi(read_text(log));
    CHECK(::getpgid(grandchild) == p->pid());
    p->terminate(5s);
    CHECK(wait_until([&] { return not_running(grandchild); }, 10s));
}

TEST_CASE("process: stdout and stderr are appended to the log file") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    std::ofstream(log) << "earlier\n";
    auto p = start_process({{"/bin/sh", "-c", "echo to-out; echo to-err >&2; exit 0"}, log});
    CHECK(wait_exit(*p).code == 0);
    CHECK(read_text(log) == "earlier\nto-out\nto-err\n");
}

TEST_CASE("process: a child that cannot start is an error naming it") {
    try {
        start_process({{"/nonexistent/llama-server", "-m", "x"}, ""});
        FAIL("started a missing program");
    } catch (const std::system_error& e) {
        CHECK(contains(e.what(), "cannot start /nonexistent/llama-server"));
        CHECK(e.code() == std::errc::no_such_file_or_directory);
    }
    CHECK_THROWS_AS(start_process({{"no-such-program-warmslot"}, ""}), std::system_error);
    CHECK_THROWS_AS(start_process({{}, ""}), std::system_error);
    try {
        start_process({{"/bin/true"}, "/nonexistent-dir/child.log"});
        FAIL("started with an unwritable log");
    } catch (const std::system_error& e) {
        CHECK(contains(e.what(), "cannot open log file /nonexistent-dir/child.log"));
    }
}

TEST_CASE("process: destroying a running child kills and reaps it") {
    pid_t pid = 0;
    {
        auto p = start_process({{"sleep", "30"}, ""});
        pid = static_cast<pid_t>(p->pid());
    }
    CHECK(::kill(pid, 0) != 0);  // reaped: not even a zombie is left
}

TEST_CASE("process: pick_free_loopback_port returns a port that can be bound") {
    const std::uint16_t port = warmslot::app::pick_free_loopback_port();
    CHECK(port > 0);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
}

TEST_CASE("process: the child gets no descriptors but stdin, stdout and stderr") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    const int leaked = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
    REQUIRE(leaked > 2);
    auto p = start_process({{"/bin/sh", "-c", "ls /proc/$$/fd"}, log});
    CHECK(wait_exit(*p).code == 0);
    ::close(leaked);
    CHECK(read_text(log) == "0\n1\n2\n");  // the shell's own descriptors
}

namespace {

const char* warmslot_bin() {
    const char* bin = std::getenv("WARMSLOT_BIN");
    REQUIRE_MESSAGE(bin != nullptr, "set WARMSLOT_BIN to the warmslot binary");
    return bin;
}

// A shell (started without a guard) that starts `sleep 30` in the background, through the
// guard when `guarded`, prints the sleep's pid and waits. Returns the shell and that pid.
std::pair<std::unique_ptr<process>, pid_t> shell_with_sleep(const std::string& log, bool guarded) {
    const std::string start = guarded ? "\"$0\" exec-child $$ -- sleep 30 &" : "sleep 30 &";
    auto sh = start_process({{"/bin/sh", "-c", start + " echo $!; wait", warmslot_bin()}, log});
    REQUIRE(wait_until([&] { return contains(read_text(log), "\n"); }, 10s));
    const pid_t sleeper = std::stoi(read_text(log));
    // The sleep is running (the guard has exec'd it) before its parent goes.
    REQUIRE(wait_until(
        [&] {
            return contains(read_text("/proc/" + std::to_string(sleeper) + "/cmdline"), "sleep");
        },
        10s));
    return {std::move(sh), sleeper};
}

}  // namespace

#ifdef __linux__
TEST_CASE("process: a guarded child ends when the process that started it is SIGKILLed") {
    const temp_dir dir("process");
    auto [sh, guarded_pid] = shell_with_sleep(dir.file("guarded.log"), true);
    const pid_t sleeper = guarded_pid;               // a lambda cannot capture a structured binding
    ::kill(static_cast<pid_t>(sh->pid()), SIGKILL);  // the shell only, not its group
    CHECK(wait_exit(*sh).signal == SIGKILL);
    CHECK(wait_until([&] { return not_running(sleeper); }, 10s));

    // Without the guard the same child outlives its parent (then the test ends it).
    auto [plain_sh, plain_pid] = shell_with_sleep(dir.file("plain.log"), false);
    const pid_t survivor = plain_pid;
    ::kill(static_cast<pid_t>(plain_sh->pid()), SIGKILL);
    CHECK(wait_exit(*plain_sh).signal == SIGKILL);
    CHECK_FALSE(wait_until([&] { return not_running(survivor); }, 1s));
    ::kill(survivor, SIGKILL);
}
#endif

TEST_CASE("process: through the guard the program runs as itself, with its exit code") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    warmslot::app::process_options opts{{"/bin/sh", "-c", "echo $$ \"$1\"; exit 3", "sh", "a b"},
                                        log};
    opts.guard = warmslot_bin();
    auto p = start_process(opts);
    CHECK(wait_exit(*p).code == 3);
    CHECK(read_text(log) == std::to_string(p->pid()) + " a b\n");  // the same process, exec'd

    opts = {{"/nonexistent/llama-server"}, ""};
    opts.guard = warmslot_bin();
    CHECK_THROWS_WITH_AS(start_process(opts),
                         doctest::Contains("cannot start /nonexistent/llama-server"),
                         std::system_error);
    // A guard whose parent is not the one named gives up without starting the program.
    auto orphan =
        start_process({{warmslot_bin(), "exec-child", "1", "--", "/bin/sh", "-c", "exit 0"}, ""});
    CHECK(wait_exit(*orphan).code == 127);
}

TEST_CASE("process: a given environment is the child's whole environment, through the guard too") {
    const temp_dir dir("process");
    const std::string log = dir.file("child.log");
    ::setenv("WARMSLOT_TEST_SECRET", "s3cret", 1);
    warmslot::app::process_options opts{{"env"}, log};  // found through the given PATH
    opts.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "ONLY_THIS=1"};
    auto p = start_process(opts);
    CHECK(wait_exit(*p).code == 0);
    CHECK(read_text(log) == "PATH=/usr/bin:/bin\nONLY_THIS=1\n");

    const std::string guarded_log = dir.file("guarded.log");
    opts.log_path = guarded_log;
    opts.guard = warmslot_bin();
    auto g = start_process(opts);
    CHECK(wait_exit(*g).code == 0);
    CHECK(read_text(guarded_log) == "PATH=/usr/bin:/bin\nONLY_THIS=1\n");
    ::unsetenv("WARMSLOT_TEST_SECRET");
    const auto mine = warmslot::app::current_environment();
    CHECK(std::find(mine.begin(), mine.end(), "PATH=" + std::string(std::getenv("PATH"))) !=
          mine.end());
}
