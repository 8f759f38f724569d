#include "http/server.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <array>
#include <system_error>
#include <tuple>

#include "api/errors.hpp"

namespace warmslot::http_server {
namespace {

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("http");
    return logger;
}

bool expected_end(const error_code& ec) {
    return ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == beast::error::timeout ||
           ec == net::error::operation_aborted || ec == net::error::bad_descriptor;
}

void append_fields(std::string& head, const http::fields& fields) {
    for (const auto& f : fields) {
        head.append(f.name_string().data(), f.name_string().size());
        head.append(": ", 2);
        head.append(f.value().data(), f.value().size());
        head.append("\r\n", 2);
    }
    head.append("\r\n", 2);
}

}  // namespace

std::string serialized_head(const http::response_header<>& head) {
    std::string out;
    out.reserve(512);
    out.append(head.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
    out.append(fmt::format("{:03d} ", head.result_int() % 1000));
    out.append(head.reason().data(), head.reason().size());
    out.append("\r\n", 2);
    append_fields(out, head);
    return out;
}

std::string serialized_last_chunk(const http::fields& trailers) {
    std::string out = "0\r\n";
    append_fields(out, trailers);
    return out;
}

awaitable<error_code> write_message(timed_stream& stream,
                                    const http::response<http::string_body>& m) {
    error_code ec;
    if (m.chunked() || (m.version() != 10 && m.version() != 11)) {
        std::tie(ec, std::ignore) = co_await http::async_write(stream, m, nothrow);
        co_return ec;
    }
    const std::string head = serialized_head(m.base());
    const std::array<net::const_buffer, 2> buffers{net::buffer(head), net::buffer(m.body())};
    std::tie(ec, std::ignore) = co_await net::async_write(stream, buffers, nothrow);
    co_return ec;
}

workers::workers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        contexts_.push_back(std::make_unique<net::io_context>(1));
        guards_.push_back(std::make_unique<net::executor_work_guard<net::io_context::executor_type>>(
            contexts_.back()->get_executor()));
    }
}

workers::~workers() {
    stop();
    join();
}

void workers::start() {
    for (auto& c : contexts_) threads_.emplace_back([ctx = c.get()] { ctx->run(); });
}

void workers::stop() {
    for (auto& c : contexts_) c->stop();
}

void workers::join() {
    for (auto& t : threads_) {
        if (t.joinable()) t.join();
    }
    threads_.clear();
}

server::server(const config::source& src, workers& w, handler h)
    : src_(src), workers_(w), handler_(std::move(h)), acceptor_(w.context(0)) {}

server::~server() = default;

void server::listen() {
    const auto cfg = src_.current();
    error_code ec;
    const auto address = net::ip::make_address(cfg->listen.host == "localhost" ? "127.0.0.1"
                                                                               : cfg->listen.host,
                                               ec);
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

awaitable<void> server::accept_loop() {
    while (!stopping_) {
        const std::size_t worker = next_worker_;
        next_worker_ = (next_worker_ + 1) % workers_.size();
        auto& ctx = workers_.context(worker);
        auto [ec, socket] = co_await acceptor_.async_accept(ctx, nothrow);
        if (ec) {
            if (ec == net::error::operation_aborted) co_return;
            log()->warn("accept failed: {}", ec.message());
            continue;
        }
        if (connections_.load() >= src_.current()->limits.max_connections) {
            socket.close();  // over the limit: refuse at once rather than queue
            continue;
        }
        ++connections_;  // counted here, not in the session, so the limit holds exactly
        net::co_spawn(ctx, session(std::move(socket), worker), net::detached);
    }
}

awaitable<void> server::session(tcp::socket socket, std::size_t worker) {
    socket.set_option(tcp::no_delay(true));
    timed_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    try {
        bool first = true;
        while (!stopping_ && co_await serve_one(stream, buffer, first, worker)) first = false;
    } catch (const std::exception& e) {
        log()->error("connection failed: {}", e.what());
    }
    error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream.close();
    --connections_;
}

// Reads one request and serves it. Returns whether the connection may carry another.
awaitable<bool> server::serve_one(timed_stream& stream, beast::flat_buffer& buffer,
                                  bool first, std::size_t worker) {
    const auto cfg = src_.current();
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg->limits.max_header_bytes));
    parser.body_limit(cfg->limits.max_body_bytes);
    stream.expires_after(first ? cfg->timeouts.header_read : cfg->timeouts.client_idle);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, nothrow);
    const std::string id = fmt::format("{:x}", next_id_++);
    if (ec == http::error::header_limit) {
        co_await write_json(stream, 431, api::error_body(api::error_kind::headers_too_large,
                                                         "request headers are too large"),
                            false, id, cfg->timeouts.header_read);
        co_return false;
    }
    if (ec == http::error::body_limit) {  // a declared Content-Length over the limit
        co_await write_json(stream, 413, api::error_body(api::error_kind::payload_too_large,
            fmt::format("request body is over the limit of {} bytes",
                        cfg->limits.max_body_bytes)), false, id, cfg->timeouts.header_read);
        co_return false;
    }
    if (ec) {
        if (!expected_end(ec)) log()->debug("req={} bad request header: {}", id, ec.message());
        const bool parse_error = ec.category() == http::make_error_code(http::error::bad_target).category() &&
                                 ec != http::error::end_of_stream && ec != http::error::partial_message;
        if (parse_error) {
            co_await write_json(stream, 400, api::error_body(api::error_kind::bad_request,
                                                             "malformed HTTP request"),
                                false, id, cfg->timeouts.header_read);
        }
        co_return false;
    }
    if (parser.get()[http::field::expect] == "100-continue") {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        stream.expires_after(cfg->timeouts.body_read);
        co_await http::async_write(stream, cont, nothrow);
    }
    stream.expires_after(cfg->timeouts.body_read);
    std::tie(ec, n) = parse_buffered(parser, buffer);
    if (!ec && !parser.is_done()) {
        std::tie(ec, n) = co_await http::async_read(stream, buffer, parser, nothrow);
    }
    if (ec == http::error::body_limit) {
        co_await write_json(stream, 413, api::error_body(api::error_kind::payload_too_large,
            fmt::format("request body is over the limit of {} bytes",
                        cfg->limits.max_body_bytes)), false, id, cfg->timeouts.body_read);
        co_return false;
    }
    if (ec) {
        if (ec == beast::error::timeout) {
            co_await write_json(stream, 408, api::error_body(api::error_kind::request_timeout,
                                                             "request body not received in time"),
                                false, id, cfg->timeouts.body_read);
        }
        co_return false;
    }
    stream.expires_never();

    exchange ex;
    ex.client = &stream;
    ex.request = parser.release();
    ex.id = id;
    ex.keep_alive = ex.request.keep_alive();
    ex.worker = worker;
    ++active_requests_;
    co_await handler_(ex);
    --active_requests_;
    co_return ex.keep_alive && !stopping_;
}

void server::stop(std::chrono::milliseconds grace) {
    if (stopping_.exchange(true)) return;
    net::co_spawn(acceptor_.get_executor(), [this, grace]() -> awaitable<void> {
        co_await drain(grace);
        workers_.stop();
    }, net::detached);
}

awaitable<void> server::drain(std::chrono::milliseconds grace) {
    stopping_ = true;
    error_code ignored;
    acceptor_.close(ignored);
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

awaitable<error_code> write_json(timed_stream& stream, unsigned status, std::string body,
                                 bool keep_alive, const std::string& request_id,
                                 std::chrono::milliseconds timeout) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set("X-Warmslot-Request-Id", request_id);
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    stream.expires_after(timeout);
    const auto ec = co_await write_message(stream, res);
    stream.expires_never();
    co_return ec;
}

}  // namespace warmslot::http_server
