// Keep-alive connections to backends.
//
// A pool belongs to one worker (one io_context, one thread): it is not thread-safe and needs
// no lock. Connections it hands out are bound to that worker's executor.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/beast.hpp"
#include "net/timed_stream.hpp"

namespace warmslot::upstream {

struct connection {
    explicit connection(const net::any_io_executor& ex) : stream(ex) {}
    timed_stream stream;
    beast::flat_buffer buffer;
    std::string key;      // "host:port" of the backend
    bool reused = false;  // came from the idle list: may have been closed by the peer meanwhile
};
using connection_ptr = std::unique_ptr<connection>;

// A backend host that begins with '/' is the path of a UNIX socket (the port is unused), as in
// libpq: where warmslot's own llama-servers listen (app::assign_addresses).
inline bool is_socket_path(std::string_view host) { return host.starts_with('/'); }

// The Host header for a backend: its host and port, or "localhost" for a UNIX socket.
inline std::string host_header(const std::string& host, std::uint16_t port) {
    return is_socket_path(host) ? std::string("localhost") : host + ":" + std::to_string(port);
}

// A request on a kept-alive connection failed this way before any byte of an answer: the peer
// had closed the connection while it sat idle, so the request never reached it and may be sent
// again on a new connection. Any other failure (a timeout above all) is not retried.
inline bool stale(const connection& c, error_code ec) {
    return c.reused && (ec == http::error::end_of_stream || ec == net::error::eof ||
                        ec == net::error::connection_reset || ec == net::error::broken_pipe);
}

class pool {
  public:
    // Whether an idle connection's deadline timer may stay armed until it wakes (a timer
    // operation saved per request) or is ended at release. Only for an io_context that is
    // stopped explicitly: a pending wait is work, and a thread_pool's join() waits for it.
    enum class idle_timers { keep, end };

    explicit pool(net::any_io_executor ex, std::size_t max_idle_per_backend = 64,
                  idle_timers timers = idle_timers::end)
        : ex_(std::move(ex)), max_idle_(max_idle_per_backend), timers_(timers) {}

    // An idle connection to host:port (or to the UNIX socket `host`), or a new one. `fresh`:
    // always a new one (the idle ones to host:port are closed). Errors: connect refused,
    // timeout, ...
    awaitable<std::pair<error_code, connection_ptr>> acquire(std::string host, std::uint16_t port,
                                                             std::chrono::milliseconds timeout,
                                                             bool fresh = false);

    // Gives back a connection whose last response was read in full and allows keep-alive.
    void release(connection_ptr c);

    // How many times a new connection to host:port was asked for because a pooled one turned
    // out closed (`fresh`): the backend may have restarted. A caller that compares it before
    // and after a series of calls (upstream::call retries such a connection by itself) learns
    // that it should check the backend.
    std::uint64_t stale_count(const std::string& host, std::uint16_t port) const;

  private:
    awaitable<error_code> connect_local(connection& c, const std::string& path,
                                        std::chrono::milliseconds timeout);

    net::any_io_executor ex_;
    std::size_t max_idle_;
    idle_timers timers_;
    std::unordered_map<std::string, std::vector<connection_ptr>> idle_;
    std::unordered_map<std::string, std::uint64_t> stale_;
};

}  // namespace warmslot::upstream
