// The HTTP server's bookkeeping when a handler fails: a request whose handler throws is no longer
// counted in flight once the exception has left it (a drain would otherwise wait for it to the
// end of its grace period, every time). The real server on loopback port 0, a plain socket.
#include "http/server.hpp"

#include <doctest/doctest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace warmslot {
namespace {

using namespace std::chrono_literals;

config::config throwing_config() {
    config::config c;
    c.listen.port = 0;
    c.log.access = false;
    c.log.level = "error";
    return c;
}

}  // namespace

TEST_CASE("server: a handler that throws leaves no request counted in flight") {
    config::source cfg(throwing_config());
    http_server::workers workers(1);
    std::atomic<int> calls = 0;
    http_server::server server(cfg, workers, [&](http_server::exchange&) -> awaitable<void> {
        ++calls;
        throw std::runtime_error("a bug on the request path");
        co_return;
    });
    server.listen();
    workers.start();
    {
        net::io_context ctx;
        tcp::socket s(ctx);
        s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server.port()));
        const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        net::write(s, net::buffer(req));
        // The connection ends (the session catches the exception and closes it).
        std::string got(256, '\0');
        error_code ec;
        while (!ec) s.read_some(net::buffer(got), ec);
    }
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server.connections() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(2ms);  // poll interval, not a wait for an outcome
    CHECK(calls == 1);
    CHECK(server.connections() == 0);
    CHECK(server.active_requests() == 0);
    server.stop(100ms);
    workers.join();
}

}  // namespace warmslot
