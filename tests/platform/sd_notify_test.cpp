#include "app/sd_notify.hpp"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "app/process.hpp"
#include "helpers.hpp"

namespace notify = warmslot::app::sd_notify;
using warmslot::test::temp_dir;

namespace {

// A datagram socket standing in for systemd's notify socket; sets NOTIFY_SOCKET while alive.
class fake_systemd {
  public:
    explicit fake_systemd(const std::string& name) {
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd_ >= 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::memcpy(addr.sun_path, name.data(), name.size());
        if (name.front() == '@') addr.sun_path[0] = '\0';
        const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
        REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), length) == 0);
        timeval timeout{5, 0};  // a missing message fails the test instead of hanging it
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        ::setenv("NOTIFY_SOCKET", name.c_str(), 1);
    }
    ~fake_systemd() {
        ::unsetenv("NOTIFY_SOCKET");
        ::close(fd_);
    }
    fake_systemd(const fake_systemd&) = delete;
    fake_systemd& operator=(const fake_systemd&) = delete;

    std::string receive() const {
        char buffer[4096];
        const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
        return n < 0 ? "<nothing>" : std::string(buffer, static_cast<std::size_t>(n));
    }

  private:
    int fd_ = -1;
};

void check_messages(const fake_systemd& systemd) {
    CHECK(notify::ready().sent);
    CHECK(systemd.receive() == "READY=1");
    CHECK(notify::ready("serving 2 backends").sent);
    CHECK(systemd.receive() == "READY=1\nSTATUS=serving 2 backends");

    const std::uint64_t before = notify::monotonic_usec();
    CHECK(notify::reloading("reloading /etc/warmslot/warmslot.yaml").sent);
    const std::uint64_t after = notify::monotonic_usec();
    const std::string reload = systemd.receive();
    const std::string prefix = "RELOADING=1\nMONOTONIC_USEC=";
    REQUIRE(reload.starts_with(prefix));
    const std::size_t end = reload.find('\n', prefix.size());
    REQUIRE(end != std::string::npos);
    const std::uint64_t usec = std::stoull(reload.substr(prefix.size(), end - prefix.size()));
    CHECK(usec >= before);
    CHECK(usec <= after);
    CHECK(reload.substr(end) == "\nSTATUS=reloading /etc/warmslot/warmslot.yaml");

    CHECK(notify::stopping().sent);
    CHECK(systemd.receive() == "STOPPING=1");
    CHECK(notify::status("config error:\nline 3").sent);
    CHECK(systemd.receive() == "STATUS=config error: line 3");
    CHECK(notify::status("").sent);
    CHECK(systemd.receive() == "STATUS=");
    CHECK(notify::notify("WATCHDOG=1").sent);
    CHECK(systemd.receive() == "WATCHDOG=1");
}

}  // namespace

TEST_CASE("sd_notify: messages reach a socket named by path") {
    const temp_dir dir("notify");
    const fake_systemd systemd(dir.file("notify.sock"));
    check_messages(systemd);
}

TEST_CASE("sd_notify: messages reach an abstract socket") {
    const fake_systemd systemd("@warmslot-notify-test-" + std::to_string(::getpid()));
    check_messages(systemd);
}

TEST_CASE("sd_notify: without NOTIFY_SOCKET nothing is sent and nothing fails") {
    ::unsetenv("NOTIFY_SOCKET");
    const notify::result r = notify::ready("x");
    CHECK_FALSE(r.sent);
    CHECK_FALSE(r.error);
    CHECK_FALSE(notify::stopping().sent);
}

TEST_CASE("sd_notify: an unusable NOTIFY_SOCKET is reported, not thrown") {
    const temp_dir dir("notify");
    ::setenv("NOTIFY_SOCKET", dir.file("nobody-listens.sock").c_str(), 1);
    const notify::result gone = notify::ready();
    CHECK_FALSE(gone.sent);
    CHECK(gone.error == std::errc::no_such_file_or_directory);
    ::setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    CHECK(notify::ready().error == std::errc::address_family_not_supported);
    ::unsetenv("NOTIFY_SOCKET");
}

// The real binary under a fake systemd: READY once it serves, RELOADING then READY around a
// SIGHUP reload, STOPPING on SIGTERM, then exit 0. ctest passes the binary in WARMSLOT_BIN.
TEST_CASE("warmslot tells systemd when it is ready, reloading and stopping") {
    const char* bin = std::getenv("WARMSLOT_BIN");
    REQUIRE_MESSAGE(bin != nullptr, "set WARMSLOT_BIN to the warmslot binary");
    const temp_dir dir("notify_run");
    const std::string config = dir.file("warmslot.yaml");
    std::ofstream(config) << "listen: 127.0.0.1:0\nbackends:\n  - name: b\n"
                             "    url: http://127.0.0.1:9\nlog:\n  level: warn\n";
    const fake_systemd systemd("@warmslot-notify-run-" + std::to_string(::getpid()));
    warmslot::app::process_options opts;
    opts.argv = {bin, "--config", config};
    opts.log_path = dir.file("warmslot.log");
    auto child = warmslot::app::start_process(opts);
    const auto pid = static_cast<pid_t>(child->pid());

    CHECK(systemd.receive().starts_with("READY=1\nSTATUS=listening on 127.0.0.1:"));
    REQUIRE(::kill(pid, SIGHUP) == 0);
    CHECK(systemd.receive().starts_with("RELOADING=1\nMONOTONIC_USEC="));
    CHECK(systemd.receive() == "READY=1\nSTATUS=config reloaded");
    REQUIRE(::kill(pid, SIGTERM) == 0);
    CHECK(systemd.receive() == "STOPPING=1\nSTATUS=draining requests");

    std::optional<warmslot::app::exit_status> ended;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!(ended = child->poll()) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(ended.has_value());
    CHECK(ended->exited);
    CHECK(ended->code == 0);
}
