// libFuzzer target: arbitrary bytes from a client to warmslot's HTTP server (http/):
// the header and body parsers under their limits, 100-continue, the screen, error answers,
// keep-alive and pipelining, and the lingering close. The real server runs on its own thread on
// loopback port 0 with a small handler; each input is written on a new connection whose sending
// side is then shut, and the answer is read until the server closes. A crash, a sanitizer
// report, or a connection the server never closes (abort after 10 s) is a finding.
// See tests/CMakeLists.txt (WARMSLOT_FUZZ).
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DWARMSLOT_FUZZ=ON
//   cmake --build build-fuzz --target http_fuzz
//   mkdir -p corpus && build-fuzz/tests/http_fuzz -max_len=4096 -timeout=20 corpus
//   tests/fuzz/seeds/http
//
// (New inputs go to the first directory; the seeds stay as they are.) Each input costs a
// loopback connection: expect hundreds of runs per second, not hundreds of thousands.
//
// Limits are small (1 KiB of headers, 16 fields, 4 KiB of body) so that inputs of a few
// kilobytes reach them.
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>

#include "http/server.hpp"

namespace {

using namespace warmslot;
using namespace std::chrono_literals;

config::config fuzz_config() {
    config::config c;
    c.listen.host = "127.0.0.1";
    c.listen.port = 0;
    c.limits.max_header_bytes = 1024;
    c.limits.max_header_count = 16;
    c.limits.max_body_bytes = 4096;
    c.limits.max_connections = 64;
    c.timeouts.header_read = 5s;
    c.timeouts.body_read = 5s;
    c.timeouts.client_idle = 5s;
    c.timeouts.stream_idle = 5s;
    c.log.level = "off";
    return c;
}

// Answers with the body's size; a body the screen refused gets 401. Targets under /deny are
// refused by the screen, so that both paths are reached.
awaitable<void> handle(http_server::exchange& ex) {
    const unsigned status = ex.body_skipped ? 401 : 200;
    const auto ec = co_await http_server::write_json(
        *ex.client, status, "{\"bytes\":" + std::to_string(ex.request.body().size()) + "}",
        ex.keep_alive, ex.id, 5s);
    if (ec) ex.keep_alive = false;
}

struct fuzz_server {
    config::source src{fuzz_config()};
    http_server::workers workers{1};
    http_server::server server{src, workers, handle, [](const http::request_header<>& h) {
                                   return !std::string_view(h.target()).starts_with("/deny");
                               }};
    fuzz_server() {
        spdlog::set_level(spdlog::level::off);
        server.listen();
        workers.start();
    }
};

int connect_to(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) std::abort();
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static auto* const s = new fuzz_server;  // lives as long as the process
    const int fd = connect_to(s->server.port());
    std::size_t off = 0;
    while (off < size) {
        const auto n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) break;  // the server closed after an answer: fine
        off += static_cast<std::size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    char buf[4096];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 10'000) <= 0) std::abort();  // the server never closed
        const auto n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
    }
    ::close(fd);
    return 0;
}
