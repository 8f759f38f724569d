// timed_stream's deadlines on a real loopback connection in one io_context: an operation
// pending when its deadline passes ends with beast::error::timeout; a
// deadline that passes while nothing is pending does nothing; moving the deadline while an
// operation is pending counts from then.
#include "net/timed_stream.hpp"

#include <doctest/doctest.h>

#include <array>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace warmslot {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// A connected pair on loopback: `near` is the stream under test, `far` the plain peer.
struct pair {
    net::io_context ctx{1};
    timed_stream near{ctx.get_executor()};
    tcp::socket far{ctx};

    pair() {
        tcp::acceptor acceptor(ctx, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
        error_code connected = net::error::would_block;
        near.async_connect(acceptor.local_endpoint(), [&](error_code ec) { connected = ec; });
        acceptor.accept(far);
        run_until([&] { return connected != net::error::would_block; });
        REQUIRE_MESSAGE(!connected, connected.message());
    }
    // Runs handlers until `done` holds; fails the test after 5 s.
    template <typename Pred>
    void run_until(Pred done) {
        const auto limit = clock_type::now() + 5s;
        while (!done() && clock_type::now() < limit) {
            ctx.restart();
            ctx.run_for(5ms);
        }
        REQUIRE(done());
    }
    // Runs handlers for `d` (timers included).
    void run_for(clock_type::duration d) {
        const auto until = clock_type::now() + d;
        while (clock_type::now() < until) {
            ctx.restart();
            ctx.run_until(until);
        }
    }
    void send_byte() {
        const char c = 'x';
        net::write(far, net::buffer(&c, 1));
    }
};

struct result {
    std::optional<error_code> ec;
    clock_type::time_point at;
    bool done() const { return ec.has_value(); }
};

void start_read(pair& p, result& r, std::array<char, 16>& buf) {
    p.near.async_read_some(net::buffer(buf), [&r](error_code ec, std::size_t) {
        r.ec = ec;
        r.at = clock_type::now();
    });
}

// The peer sends a byte and the stream reads it, under whatever deadline it has.
void read_sent_byte(pair& p, std::array<char, 16>& buf) {
    result r;
    p.send_byte();
    start_read(p, r, buf);
    p.run_until([&] { return r.done(); });
    REQUIRE_FALSE(*r.ec);
}

}  // namespace

TEST_CASE("timed_stream: a read pending past its deadline ends with timeout") {
    pair p;
    std::array<char, 16> buf{};
    result r;
    const auto start = clock_type::now();
    p.near.expires_after(100ms);
    start_read(p, r, buf);
    p.run_until([&] { return r.done(); });
    CHECK(*r.ec == beast::error::timeout);
    CHECK(r.at - start >= 100ms);
    CHECK(r.at - start < 2s);
    CHECK(p.near.timed_out());

    // The socket is left to its owner, who may still answer (a 408) before closing it.
    REQUIRE(p.near.socket().is_open());
    p.near.expires_after(5s);
    const std::string answer = "late";
    std::optional<error_code> written;
    net::async_write(p.near, net::buffer(answer),
                     [&](error_code ec, std::size_t) { written = ec; });
    p.run_until([&] { return written.has_value(); });
    CHECK_FALSE(*written);
    std::string got(answer.size(), '\0');
    net::read(p.far, net::buffer(got));
    CHECK(got == answer);
}

TEST_CASE("timed_stream: a write the peer never takes is cut at its deadline") {
    pair p;
    const std::vector<char> big(64 * 1024 * 1024, 'x');  // more than the socket buffers hold
    std::optional<error_code> ec;
    p.near.expires_after(150ms);
    net::async_write(p.near, net::buffer(big), [&](error_code e, std::size_t) { ec = e; });
    p.run_until([&] { return ec.has_value(); });
    CHECK(*ec == beast::error::timeout);
    CHECK(p.near.timed_out());
}

TEST_CASE("timed_stream: a deadline passing while nothing is pending does nothing") {
    pair p;
    std::array<char, 16> buf{};
    p.near.expires_after(50ms);
    read_sent_byte(p, buf);

    p.run_for(150ms);  // the deadline passes with no operation pending
    CHECK_FALSE(p.near.timed_out());
    CHECK(p.near.socket().is_open());

    result second;  // a new deadline for the next read, which then succeeds
    p.near.expires_after(5s);
    start_read(p, second, buf);
    p.send_byte();
    p.run_until([&] { return second.done(); });
    CHECK_FALSE(*second.ec);
}

TEST_CASE("timed_stream: an operation started after its deadline passed is cut at once") {
    pair p;
    std::array<char, 16> buf{};
    p.near.expires_after(20ms);
    p.run_for(60ms);
    result r;
    const auto start = clock_type::now();
    start_read(p, r, buf);
    p.run_until([&] { return r.done(); });
    CHECK(*r.ec == beast::error::timeout);
    CHECK(r.at - start < 1s);
}

TEST_CASE("timed_stream: a deadline moved while a read is pending counts from then") {
    pair p;
    std::array<char, 16> buf{};

    SUBCASE("later: the read outlives the first deadline") {
        result r;
        p.near.expires_after(100ms);
        start_read(p, r, buf);
        p.run_for(50ms);
        p.near.expires_after(400ms);
        p.run_for(150ms);  // past the first deadline
        REQUIRE_FALSE(r.done());
        p.send_byte();
        p.run_until([&] { return r.done(); });
        CHECK_FALSE(*r.ec);
        CHECK_FALSE(p.near.timed_out());
    }
    SUBCASE("earlier: the read ends long before the first deadline") {
        result r;
        const auto start = clock_type::now();
        p.near.expires_after(10s);
        start_read(p, r, buf);
        p.run_for(20ms);
        p.near.expires_after(50ms);
        p.run_until([&] { return r.done(); });
        CHECK(*r.ec == beast::error::timeout);
        CHECK(r.at - start >= 70ms);
        CHECK(r.at - start < 3s);
    }
    SUBCASE("never: the deadline is lifted") {
        result r;
        p.near.expires_after(50ms);
        start_read(p, r, buf);
        p.near.expires_never();
        p.run_for(150ms);
        REQUIRE_FALSE(r.done());
        p.send_byte();
        p.run_until([&] { return r.done(); });
        CHECK_FALSE(*r.ec);
    }
}

TEST_CASE("timed_stream: disarm ends the timer's wait, so an idle stream leaves no work") {
    pair p;
    std::array<char, 16> buf{};
    p.near.expires_after(10s);
    read_sent_byte(p, buf);
    p.ctx.restart();
    p.ctx.run_for(50ms);
    CHECK_FALSE(p.ctx.stopped());  // the wait for the 10 s deadline is still work

    p.near.disarm();
    p.ctx.restart();
    const auto start = clock_type::now();
    p.ctx.run_for(2s);
    CHECK(p.ctx.stopped());  // out of work at once
    CHECK(clock_type::now() - start < 1s);
}

TEST_CASE("timed_stream: destroyed while its timer is armed, it is never touched again") {
    net::io_context ctx{1};
    tcp::acceptor acceptor(ctx, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    auto near = std::make_unique<timed_stream>(ctx.get_executor());
    tcp::socket far(ctx);
    std::optional<error_code> connected;
    near->expires_after(50ms);  // armed by the connect, still armed after it
    near->async_connect(acceptor.local_endpoint(), [&](error_code ec) { connected = ec; });
    acceptor.accept(far);
    while (!connected) ctx.run_one();
    REQUIRE_FALSE(*connected);
    near.reset();
    ctx.restart();
    const auto start = clock_type::now();
    const std::size_t handlers = ctx.run_for(2s);
    CHECK(handlers == 1);  // only the timer's wait, ended as cancelled: no work is left
    CHECK(clock_type::now() - start < 1s);
}

}  // namespace warmslot
