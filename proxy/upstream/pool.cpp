#include "upstream/pool.hpp"

#include <tuple>
#include <variant>

#ifndef _WIN32
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#endif

namespace warmslot::upstream {

awaitable<std::pair<error_code, connection_ptr>> pool::acquire(std::string host, std::uint16_t port,
                                                               std::chrono::milliseconds timeout,
                                                               bool fresh) {
    std::string key = host + ":" + std::to_string(port);
    auto it = idle_.find(key);
    // A pooled connection just turned out closed: the others idle since the same burst
    // (llama-server closes its side after a streamed answer) are suspect too.
    if (fresh && it != idle_.end()) it->second.clear();
    if (fresh) ++stale_[key];
    while (it != idle_.end() && !it->second.empty()) {
        connection_ptr c = std::move(it->second.back());
        it->second.pop_back();
        if (c->stream.socket().is_open()) {
            c->reused = true;
            co_return std::pair{error_code{}, std::move(c)};
        }
    }
    auto c = std::make_unique<connection>(ex_);
    c->key = std::move(key);
    if (is_socket_path(host)) {
        const auto ec = co_await connect_local(*c, host, timeout);
        if (ec) co_return std::pair{ec, connection_ptr{}};
        co_return std::pair{error_code{}, std::move(c)};
    }
    c->stream.expires_after(timeout);
    error_code ec;
    const auto address = net::ip::make_address(host, ec);
    if (!ec) {
        std::tie(ec) = co_await c->stream.async_connect(tcp::endpoint(address, port), nothrow);
    } else {  // a host name such as "localhost"
        tcp::resolver resolver(ex_);
        auto [rec, endpoints] =
            co_await resolver.async_resolve(host, std::to_string(port), nothrow);
        if (rec) co_return std::pair{rec, connection_ptr{}};
        std::tie(ec, std::ignore) = co_await c->stream.async_connect_any(endpoints, nothrow);
    }
    if (ec) co_return std::pair{ec, connection_ptr{}};
    c->stream.socket().set_option(tcp::no_delay(true));
    c->stream.expires_never();
    co_return std::pair{error_code{}, std::move(c)};
}

// A UNIX socket's connect completes at once or fails at once (no such file, nobody listening),
// except when the listener's backlog is full: then it waits, up to `timeout`. The connected
// descriptor is handed to the connection's socket, whose reads, writes, cancel and close are
// those of any stream socket (nothing on the upstream side asks it for a TCP address).
awaitable<error_code> pool::connect_local(connection& c, const std::string& path,
                                          std::chrono::milliseconds timeout) {
#ifdef _WIN32
    (void)c, (void)path, (void)timeout;
    co_return make_error_code(net::error::operation_not_supported);
#else
    using local = net::local::stream_protocol;
    using namespace net::experimental::awaitable_operators;
    local::socket s(ex_);
    net::steady_timer timer(ex_);
    timer.expires_after(timeout);
    // Whichever ends first cancels the other, and both have ended when this resumes.
    const auto done =
        co_await (s.async_connect(local::endpoint(path), nothrow) || timer.async_wait(nothrow));
    if (done.index() == 1) co_return make_error_code(beast::error::timeout);
    error_code ec = std::get<0>(std::get<0>(done));
    if (ec) co_return ec;
    const auto fd = s.release(ec);
    if (ec) co_return ec;
    c.stream.socket().assign(tcp::v4(), fd, ec);
    if (ec) ::close(fd);
    co_return ec;
#endif
}

std::uint64_t pool::stale_count(const std::string& host, std::uint16_t port) const {
    const auto it = stale_.find(host + ":" + std::to_string(port));
    return it == stale_.end() ? 0 : it->second;
}

void pool::release(connection_ptr c) {
    if (!c || !c->stream.socket().is_open()) return;
    if (timers_ == idle_timers::end) {
        c->stream.disarm();
    } else {
        c->stream.expires_never();
    }
    c->buffer.clear();
    auto& list = idle_[c->key];
    if (list.size() < max_idle_) list.push_back(std::move(c));
}

}  // namespace warmslot::upstream
