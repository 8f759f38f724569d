// The server's connections: listening, the accept loop and its limit, one session per
// connection with its TLS handshake and its wait between requests, and the drain at stop. See
// server.hpp; request.cpp reads and serves one request, response.cpp writes answers,
// workers.cpp runs the io_contexts.
#include "http/server.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <system_error>

#include "api/errors.hpp"
#include "http/server_log.hpp"

namespace warmslot::http_server {
namespace {

using namespace server_detail;

// An accept that fails (out of file descriptors) is retried after this, not at once.
constexpr std::chrono::milliseconds accept_backoff{100};
// A connection closed after an error answer reads what its client still sends for at most
// this long and this many bytes before it closes.
constexpr std::chrono::milliseconds linger_time{2000};
constexpr std::size_t linger_bytes = 16 * 1024 * 1024;
// Over-limit connections answered 503 at the same time; more are closed unanswered.
constexpr std::size_t max_refusing = 64;
// A connection's read buffer holds at most max_header_bytes plus this.
constexpr std::size_t buffer_slack = 64 * 1024;

// Ends a connection: our side first (FIN after what was written), then, when the client may
// still be sending (an error answer cut its request short), reads and discards its bytes for a
// bounded time and byte count, so that closing with unread bytes does not send a reset that
// could destroy the answer before the client reads it.
awaitable<void> close_gracefully(timed_stream& stream, bool drain_input) {
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (drain_input && !ec) {
        stream.expires_after(linger_time);
        std::array<char, 16 * 1024> sink;
        std::size_t total = 0;
        while (total < linger_bytes) {
            auto [rec, n] = co_await stream.async_read_some(net::buffer(sink), nothrow);
            total += n;
            if (rec) break;
        }
        stream.expires_never();
    }
    stream.close();
}

}  // namespace

server::server(const config::source& src, workers& w, handler h, screen s)
    : src_(src),
      workers_(w),
      handler_(std::move(h)),
      screen_(std::move(s)),
      acceptor_(w.context(0)),
      idle_(w.size(), nullptr) {}

server::~server() = default;

void server::listen() {
    const auto cfg = src_.current();
    if (cfg->tls.enabled()) reload_tls(*cfg);
    error_code ec;
    const auto address =
        net::ip::make_address(cfg->listen.host == "localhost" ? "127.0.0.1" : cfg->listen.host, ec);
    const std::string where = fmt::format("{}:{}", cfg->listen.host, cfg->listen.port);
    if (ec) throw std::system_error(ec, "listen address " + where);
    const tcp::endpoint ep(address, cfg->listen.port);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep, ec);
    if (ec) throw std::system_error(ec, "cannot listen on " + where);
    acceptor_.listen(net::socket_base::max_listen_connections);
    port_ = acceptor_.local_endpoint().port();
    net::co_spawn(acceptor_.get_executor(), accept_loop(), net::detached);
}

void server::reload_tls(const config::config& cfg) {
    if (!cfg.tls.enabled()) return;
    auto context = tls::load_server_context(cfg.tls.cert_file, cfg.tls.key_file);
    const std::lock_guard lock(tls_mu_);
    tls_ = std::move(context);
}

std::shared_ptr<const tls::server_context> server::tls_context() const {
    const std::lock_guard lock(tls_mu_);
    return tls_;
}

awaitable<void> server::accept_loop() {
    net::steady_timer backoff(acceptor_.get_executor());
    bool failing = false;
    while (!stopping_) {
        const std::size_t worker = next_worker_;
        next_worker_ = (next_worker_ + 1) % workers_.size();
        auto& ctx = workers_.context(worker);
        auto [ec, socket] = co_await acceptor_.async_accept(ctx, nothrow);
        if (ec == net::error::operation_aborted) co_return;
        if (ec == net::error::connection_aborted) continue;  // the client left the backlog
        if (ec) {
            // Out of file descriptors (EMFILE, ENFILE) or memory: the pending connection stays
            // in the backlog and the next accept would fail at once. Wait instead of spinning.
            if (!std::exchange(failing, true)) {
                log()->warn("accept failed: {}; retrying every {} ms", ec.message(),
                            accept_backoff.count());
            }
            backoff.expires_after(accept_backoff);
            co_await backoff.async_wait(nothrow);
            continue;
        }
        if (std::exchange(failing, false)) log()->info("accepting connections again");
        const std::size_t limit = src_.current()->limits.max_connections;
        if (connections_.load() >= limit) {
            // Over the limit: a 503 the client can act on, unless too many are being answered.
            refusals_.add(refusal::too_many_connections);
            if (refusing_.load() < max_refusing) {
                ++refusing_;
                net::co_spawn(ctx, refuse_connection(std::move(socket), limit), net::detached);
            } else {
                error_code ignored;
                socket.close(ignored);
            }
            continue;
        }
        ++connections_;  // counted here, not in the session, so the limit holds exactly
        net::co_spawn(ctx, session(std::move(socket), worker), net::detached);
    }
}

awaitable<void> server::refuse_connection(tcp::socket socket, std::size_t limit) {
    timed_stream stream(std::move(socket));
    const std::string id = fmt::format("{:x}", next_id_++);
    const auto cfg = src_.current();
    if (cfg->log.access) {  // counted by the accept loop, with the connections closed unanswered
        access_log()->info(
            "req={} - - 503 backend=- slot=- route=\"-\" refused={} peer={} error={}", id,
            name(refusal::too_many_connections), peer_of(stream),
            api::name(api::error_kind::overloaded));
    }
    http::response<http::string_body> res{http::status::service_unavailable, 11};
    res.set("X-Warmslot-Request-Id", id);
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set(http::field::retry_after, "1");
    res.keep_alive(false);
    res.body() = api::error_body(
        api::error_kind::overloaded,
        fmt::format("too many connections (limits.max_connections = {}); retry later", limit));
    res.prepare_payload();
    stream.expires_after(linger_time);
    co_await write_message(stream, res);
    co_await close_gracefully(stream, true);
    --refusing_;
}

awaitable<void> server::session(tcp::socket socket, std::size_t worker) {
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    timed_stream stream(std::move(socket));
    // Bounded: what Beast's parser keeps unconsumed (a header, a chunk-size line with its
    // extensions, trailers) can never grow past this.
    beast::flat_buffer buffer(src_.current()->limits.max_header_bytes + buffer_slack);
    ending end = ending::close;
    try {
        bool first = true;
        const bool open = co_await handshake(stream);
        while (open && !stopping_) {
            end = co_await serve_one(stream, buffer, first, worker);
            if (end != ending::keep) break;
            first = false;
        }
    } catch (const std::exception& e) {
        log()->error("connection failed: {}", e.what());
        end = ending::close;
    }
    co_await close_gracefully(stream, end == ending::linger);
    --connections_;
}

// With TLS on: the handshake, within timeouts.header_read. Whether requests may follow.
awaitable<bool> server::handshake(timed_stream& stream) {
    auto context = tls_context();
    if (!context) co_return true;
    stream.expires_after(src_.current()->timeouts.header_read);
    const auto shook = co_await tls::accept(stream, std::move(context));
    stream.expires_never();
    if (shook == tls::handshake_result::ok) co_return true;
    log()->debug("TLS handshake from {}: {}", peer_of(stream),
                 shook == tls::handshake_result::plain_http ? "plain HTTP, answered 400"
                                                            : "failed, or not done in time");
    co_return false;
}

// Waits for the first bytes of a request on a connection with nothing buffered, on the
// worker's idle list (a drain closes it there). Returns whether bytes came.
awaitable<bool> server::wait_for_request(timed_stream& stream, beast::flat_buffer& buffer,
                                         std::size_t worker) {
    idle_link link{&stream, nullptr, idle_[worker]};
    if (link.next) link.next->prev = &link;
    idle_[worker] = &link;
    auto [ec, n] = co_await stream.async_read_some(
        buffer.prepare(std::min<std::size_t>(buffer_slack, buffer.max_size())), nothrow);
    buffer.commit(n);
    (link.prev ? link.prev->next : idle_[worker]) = link.next;
    if (link.next) link.next->prev = link.prev;
    co_return !ec;  // bytes that came as a drain began are a request: served, then closed
}

void server::close_idle(std::size_t worker) {
    for (idle_link* l = idle_[worker]; l != nullptr; l = l->next) {
        error_code ignored;
        l->stream->socket().cancel(ignored);  // its read ends; the session closes
    }
}

void server::stop(std::chrono::milliseconds grace) {
    if (stopping_.exchange(true)) return;
    net::co_spawn(
        acceptor_.get_executor(),
        [this, grace]() -> awaitable<void> {
            co_await drain(grace);
            workers_.stop();
        },
        net::detached);
}

awaitable<void> server::drain(std::chrono::milliseconds grace) {
    stopping_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    for (std::size_t i = 0; i < workers_.size(); ++i) {
        net::post(workers_.context(i), [this, i] { close_idle(i); });
    }
    net::steady_timer timer(acceptor_.get_executor());
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (active_requests_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(20));
        co_await timer.async_wait(nothrow);
    }
    if (active_requests_.load() > 0) {
        log()->warn("stopping with {} requests still in flight", active_requests_.load());
    }
}

}  // namespace warmslot::http_server
