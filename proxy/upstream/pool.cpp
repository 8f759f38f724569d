#include "upstream/pool.hpp"

#include <tuple>

namespace warmslot::upstream {

awaitable<std::pair<error_code, connection_ptr>> pool::acquire(std::string host,
                                                               std::uint16_t port,
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
    c->stream.expires_after(timeout);
    error_code ec;
    const auto address = net::ip::make_address(host, ec);
    if (!ec) {
        std::tie(ec) = co_await c->stream.async_connect(tcp::endpoint(address, port), nothrow);
    } else {  // a host name such as "localhost"
        tcp::resolver resolver(ex_);
        auto [rec, endpoints] = co_await resolver.async_resolve(host, std::to_string(port), nothrow);
        if (rec) co_return std::pair{rec, connection_ptr{}};
        std::tie(ec, std::ignore) = co_await c->stream.async_connect_any(endpoints, nothrow);
    }
    if (ec) co_return std::pair{ec, connection_ptr{}};
    c->stream.socket().set_option(tcp::no_delay(true));
    c->stream.expires_never();
    co_return std::pair{error_code{}, std::move(c)};
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
