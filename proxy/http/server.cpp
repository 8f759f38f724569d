#include "http/server.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <system_error>
#include <tuple>

#include "api/errors.hpp"
#include "util/escape.hpp"

namespace warmslot::http_server {
namespace {

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

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("http");
    return logger;
}

// One request in flight while it lives.
class in_flight {
public:
    explicit in_flight(std::atomic<std::size_t>& n) : n_(n) { ++n_; }
    ~in_flight() { --n_; }
    in_flight(const in_flight&) = delete;
    in_flight& operator=(const in_flight&) = delete;

private:
    std::atomic<std::size_t>& n_;
};

std::shared_ptr<spdlog::logger> access_log() {
    static auto logger = util::module_logger("access");
    return logger;
}

// The client's address as the access line shows it ("-" when the socket no longer has one).
std::string peer_of(timed_stream& stream) {
    error_code ec;
    const auto ep = stream.socket().remote_endpoint(ec);
    if (ec) return "-";
    const auto address = ep.address().to_string();
    return ep.address().is_v6() ? fmt::format("[{}]:{}", address, ep.port())
                                : fmt::format("{}:{}", address, ep.port());
}

// A request target as a refusal's access line shows it: a hostile one may be long.
std::string_view short_target(std::string_view target) {
    constexpr std::size_t max_target = 200;
    return target.size() > max_target ? target.substr(0, max_target) : target;
}

// What warmslot refused, before the answer is written: counted, and one access line in the
// shape of the others (no header value, no key). `head` is null when the header was not read.
void note_refusal(refusal_counts& counts, timed_stream& stream, refusal why, api::error_kind kind,
                  const std::string& id, const http::request_header<>* head,
                  const config::config& cfg) {
    counts.add(why);
    if (!cfg.log.access) return;
    const std::string_view method = head ? std::string_view(head->method_string()) : "-";
    const std::string target = head ? util::escape_controls(short_target(head->target())) : "-";
    access_log()->info("req={} {} {} {} backend=- slot=- route=\"-\" refused={} peer={} error={}",
                       id.empty() ? "-" : id, method.empty() ? "-" : method,
                       target.empty() ? "-" : target, api::describe(kind).status, name(why),
                       peer_of(stream), api::name(kind));
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

bool parse_error(const error_code& ec) {
    return ec.category() == http::make_error_code(http::error::bad_target).category() &&
           ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// Parses as much of a request header as `in` holds, without the body.
error_code parse_buffered_header(http::request_parser<http::string_body>& p,
                                 beast::flat_buffer& in) {
    error_code ec;
    p.eager(false);
    while (!p.is_header_done() && in.size() > 0) {
        const std::size_t used = p.put(in.data(), ec);
        in.consume(used);
        if (ec == http::error::need_more) return {};
        if (ec || used == 0) break;
    }
    return ec;
}

bool too_many_fields(const http::fields& fields, std::size_t limit) {
    std::size_t n = 0;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
        if (++n > limit) return true;
    }
    return false;
}

// An error answer to a request whose rest is not read; the connection closes after it.
awaitable<void> answer_error(timed_stream& stream, api::error_kind kind, std::string message,
                             const std::string& id, const config::config& cfg) {
    co_await write_json(stream, api::describe(kind).status, api::error_body(kind, message), false,
                        id, cfg.timeouts.header_read);
}

// The answer to a request header that could not be read, if it deserves one (a client that
// left or was too slow gets none). Returns whether one was written.
awaitable<bool> answer_header_error(timed_stream& stream, const error_code& ec,
                                    const std::string& id, const config::config& cfg,
                                    refusal_counts& counts, const http::request_header<>& head) {
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        note_refusal(counts, stream, refusal::headers_too_large,
                     api::error_kind::headers_too_large, id, nullptr, cfg);
        co_await answer_error(stream, api::error_kind::headers_too_large,
                              "request headers are too large", id, cfg);
    } else if (ec == http::error::body_limit) {  // a declared Content-Length over the limit
        // The header is whole when its Content-Length is found over the limit.
        note_refusal(counts, stream, refusal::body_too_large, api::error_kind::payload_too_large,
                     id, &head, cfg);
        co_await answer_error(stream, api::error_kind::payload_too_large,
            fmt::format("request body is over the limit of {} bytes", cfg.limits.max_body_bytes),
            id, cfg);
    } else if (parse_error(ec)) {
        log()->debug("req={} bad request header: {}", id, ec.message());
        note_refusal(counts, stream, refusal::bad_request, api::error_kind::bad_request, id,
                     nullptr, cfg);
        co_await answer_error(stream, api::error_kind::bad_request, "malformed HTTP request", id,
                              cfg);
    } else {
        if (!expected_end(ec)) log()->debug("req={} request header: {}", id, ec.message());
        co_return false;
    }
    co_return true;
}

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

class workers::own_context : public net::io_context {
public:
    using net::io_context::io_context;
    using net::execution_context::shutdown;  // protected in execution_context
};

workers::workers(std::size_t n) : compute_((n + 1) / 2) {
    for (std::size_t i = 0; i < n; ++i) {
        contexts_.push_back(std::make_unique<own_context>(1));
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

net::io_context& workers::context(std::size_t i) {
    return *contexts_[i];
}

void workers::shutdown() {
    // The guards first: an io_context on Windows (IOCP) waits in its shutdown until no work is
    // outstanding, and a guard is outstanding work.
    guards_.clear();
    for (auto& c : contexts_) c->shutdown();
}

void workers::join() {
    for (auto& t : threads_) {
        if (t.joinable()) t.join();
    }
    threads_.clear();
    // Not stopped: its queued jobs run, and the coroutines they resume wait in the stopped
    // io_contexts, destroyed by shutdown with the rest.
    compute_.join();
}

server::server(const config::source& src, workers& w, handler h, screen s)
    : src_(src), workers_(w), handler_(std::move(h)), screen_(std::move(s)),
      acceptor_(w.context(0)), idle_(w.size(), nullptr) {}

server::~server() = default;

void server::listen() {
    const auto cfg = src_.current();
    if (cfg->tls.enabled()) reload_tls(*cfg);
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
        access_log()->info("req={} - - 503 backend=- slot=- route=\"-\" refused={} peer={} error={}",
                           id, name(refusal::too_many_connections), peer_of(stream),
                           api::name(api::error_kind::overloaded));
    }
    http::response<http::string_body> res{http::status::service_unavailable, 11};
    res.set("X-Warmslot-Request-Id", id);
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set(http::field::retry_after, "1");
    res.keep_alive(false);
    res.body() = api::error_body(api::error_kind::overloaded,
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

// Reads one request and serves it. Returns how the connection goes on.
awaitable<server::ending> server::serve_one(timed_stream& stream, beast::flat_buffer& buffer,
                                            bool first, std::size_t worker) {
    const auto cfg = src_.current();
    stream.expires_after(first ? cfg->timeouts.header_read : cfg->timeouts.client_idle);
    if (buffer.size() == 0 && !co_await wait_for_request(stream, buffer, worker)) {
        co_return ending::close;
    }
    if (!first) stream.expires_after(cfg->timeouts.header_read);
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg->limits.max_header_bytes));
    parser.body_limit(cfg->limits.max_body_bytes);
    // The header usually came whole with the first read: parsed here, without a read
    // operation that would complete through the scheduler.
    error_code ec = parse_buffered_header(parser, buffer);
    if (!ec && !parser.is_header_done()) {
        std::tie(ec, std::ignore) = co_await http::async_read_header(stream, buffer, parser, nothrow);
    }
    const std::string id = fmt::format("{:x}", next_id_++);
    if (ec) {
        const bool answered =
            co_await answer_header_error(stream, ec, id, *cfg, refusals_, parser.get());
        co_return answered ? ending::linger : ending::close;
    }
    if (too_many_fields(parser.get(), cfg->limits.max_header_count)) {
        note_refusal(refusals_, stream, refusal::too_many_headers,
                     api::error_kind::headers_too_large, id, &parser.get(), *cfg);
        co_await answer_error(stream, api::error_kind::headers_too_large,
            fmt::format("request has more than {} header fields", cfg->limits.max_header_count),
            id, *cfg);
        co_return ending::linger;
    }
    const bool has_body = parser.chunked() || parser.content_length().value_or(0) > 0;
    const bool read = !has_body || !screen_ || screen_(parser.get().base());
    if (read) {
        if (auto refused = co_await read_body(stream, buffer, parser, id, *cfg)) co_return *refused;
    }
    stream.expires_never();

    exchange ex;
    ex.client = &stream;
    ex.request = parser.release();
    ex.id = id;
    ex.body_skipped = !read;
    ex.keep_alive = read && ex.request.keep_alive() && !stopping_;
    ex.worker = worker;
    {
        // Counted for the drain until the handler ends, however it ends: an exception that
        // leaves it must not leave a request in flight forever (the drain would wait for it).
        const in_flight counted(active_requests_);
        co_await handler_(ex);
    }
    if (ex.body_skipped) co_return ending::linger;
    co_return ex.keep_alive && !stopping_ ? ending::keep : ending::close;
}

// Reads the body of a request whose header is read; an error answer if that fails.
awaitable<std::optional<server::ending>> server::read_body(
    timed_stream& stream, beast::flat_buffer& buffer,
    http::request_parser<http::string_body>& parser, const std::string& id,
    const config::config& cfg) {
    const auto& head = parser.get();
    if (head.version() >= 11 && beast::iequals(head[http::field::expect], "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        stream.expires_after(cfg.timeouts.body_read);
        co_await http::async_write(stream, cont, nothrow);
    }
    stream.expires_after(cfg.timeouts.body_read);
    auto [ec, n] = parse_buffered(parser, buffer);
    if (!ec && !parser.is_done()) {
        std::tie(ec, n) = co_await http::async_read(stream, buffer, parser, nothrow);
    }
    if (!ec) co_return std::nullopt;
    std::optional<api::error_kind> kind;
    refusal why = refusal::bad_request;
    std::string message;
    if (ec == http::error::body_limit) {
        kind = api::error_kind::payload_too_large;
        why = refusal::body_too_large;
        message = fmt::format("request body is over the limit of {} bytes",
                              cfg.limits.max_body_bytes);
    } else if (ec == http::error::buffer_overflow) {
        kind = api::error_kind::bad_request;
        why = refusal::chunk_line_too_long;
        message = fmt::format("a chunk-size line or the trailer section is over the limit of "
                              "{} bytes", buffer.max_size());
    } else if (ec == beast::error::timeout) {
        kind = api::error_kind::request_timeout;
        why = refusal::body_timeout;
        message = "request body not received in time";
    } else if (parse_error(ec)) {
        kind = api::error_kind::bad_request;
        message = "malformed request body framing (" + ec.message() + ")";
    }
    if (!kind) co_return ending::close;  // the client left
    log()->debug("req={} request body refused: {}", id, ec.message());
    note_refusal(refusals_, stream, why, *kind, id, &head, cfg);
    co_await answer_error(stream, *kind, std::move(message), id, cfg);
    co_return ending::linger;
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

namespace {

// An answer warmslot writes itself: JSON with data about the server or its clients, never to be
// cached or read as anything else.
http::response<http::string_body> json_response(unsigned status, std::string body,
                                                bool keep_alive, const std::string& request_id) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set(http::field::cache_control, "no-store");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("X-Warmslot-Request-Id", request_id);
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    return res;
}

}  // namespace

awaitable<error_code> write_json(exchange& ex, unsigned status, std::string body,
                                 std::chrono::milliseconds timeout) {
    auto res = json_response(status, std::move(body), ex.keep_alive, ex.id);
    for (const auto& [name, value] : ex.response_headers) res.set(name, value);
    res.prepare_payload();
    ex.client->expires_after(timeout);
    const auto ec = co_await write_message(*ex.client, res);
    ex.client->expires_never();
    co_return ec;
}

awaitable<error_code> write_json(timed_stream& stream, unsigned status, std::string body,
                                 bool keep_alive, const std::string& request_id,
                                 std::chrono::milliseconds timeout) {
    auto res = json_response(status, std::move(body), keep_alive, request_id);
    res.prepare_payload();
    stream.expires_after(timeout);
    const auto ec = co_await write_message(stream, res);
    stream.expires_never();
    co_return ec;
}

}  // namespace warmslot::http_server
