// Forwarding one request to a backend and relaying the answer, chunk by chunk.
//
// The story: pick a backend -> send -> wait for its headers -> relay body -> give the connection
// back. A watcher runs beside it and closes the upstream socket as soon as the client goes, so
// llama-server cancels the task and frees the slot. Failover happens only before the first byte
// reached the client.
#include <array>
#include <chrono>
#include <limits>
#include <string>

#include "api/forward_headers.hpp"
#include "service/pipeline.hpp"
#include "sse/parser.hpp"

namespace warmslot::service {
namespace {

using namespace net::experimental::awaitable_operators;

constexpr std::size_t max_tee_bytes = 4 * 1024 * 1024;  // non-streamed bodies read for timings

enum class attempt { relayed, stale_connection, backend_failed };

// Shared between the forwarding coroutine and the client watcher of one exchange.
struct forward_state {
    upstream::connection* current = nullptr; // upstream connection in use, if any
    bool client_gone = false;
    bool headers_sent = false;
    bool upstream_reusable = false; // the response was read in full and allows keep-alive
    error_code last_error;
};

// Watches the client socket without consuming bytes. Returns when the client disconnects
// (after closing the upstream connection) or when cancelled because the relay finished.
awaitable<void> watch_client(beast::tcp_stream* client, forward_state* st) {
    char byte = 0;
    auto [ec, n] = co_await client->socket().async_receive(
        net::buffer(&byte, 1), net::socket_base::message_peek, nothrow);
    if (ec == net::error::operation_aborted) co_return;
    if (!ec && n > 0) {
        // The client pipelined its next request: it is still there. Nothing more to watch.
        net::steady_timer forever(client->get_executor(), std::chrono::steady_clock::time_point::max());
        co_await forever.async_wait(nothrow);
        co_return;
    }
    st->client_gone = true;
    if (st->current) {
        error_code ignored;
        st->current->stream.socket().close(ignored);
    }
}

http::request<http::string_body> upstream_request(const http::request<http::string_body>& in,
                                                  const config::backend& b) {
    http::request<http::string_body> out{in.method(), in.target(), 11};
    for (const auto& field : in) {
        if (api::forward_request_header(std::string_view(field.name_string()))) {
            out.insert(field.name_string(), field.value());
        }
    }
    out.set(http::field::host, b.host + ":" + std::to_string(b.port));
    out.keep_alive(true);
    out.body() = in.body();
    out.prepare_payload();
    return out;
}

// Reads what the relay saw of the response to find llama-server's timings.
class stats_tee {
public:
    explicit stats_tee(bool sse) : sse_(sse) {}
    void feed(const char* data, std::size_t n) {
        if (sse_) {
            events_.clear();
            parser_.feed(std::string_view(data, n), events_);
            for (const auto& e : events_) {
                if (api::may_carry_stats(e.data)) {
                    if (auto s = api::find_prompt_stats(e.data)) stats = s;
                }
            }
        } else if (body_.size() + n <= max_tee_bytes) {
            body_.append(data, n);
        }
    }
    void finish() {
        if (!sse_ && api::may_carry_stats(body_)) stats = api::find_prompt_stats(body_);
    }
    std::optional<api::prompt_stats> stats;

private:
    bool sse_;
    sse::parser parser_;
    std::vector<sse::event> events_;
    std::string body_;
};

}  // namespace

// Relays the upstream response whose headers are in `p` to the client.
static awaitable<void> relay(http_server::exchange& ex, upstream::connection& up,
                             http::response_parser<http::buffer_body>& p, forward_state& st,
                             outcome& out, const config::config& cfg, const std::string& backend) {
    const auto& head = p.get();
    http::response<http::buffer_body> res{head.result(), 11};
    for (const auto& field : head) {
        if (api::forward_response_header(std::string_view(field.name_string()))) {
            res.insert(field.name_string(), field.value());
        }
    }
    res.set("X-Warmslot-Backend", backend);
    res.set("X-Warmslot-Request-Id", ex.id);
    const bool sse = head[http::field::content_type].starts_with("text/event-stream");
    if (auto len = p.content_length(); len && !p.chunked()) res.content_length(*len);
    else res.chunked(true);
    res.keep_alive(ex.keep_alive);
    res.body().data = nullptr;
    res.body().more = true;
    out.status = head.result_int();
    out.streamed = sse;

    http::response_serializer<http::buffer_body> sr{res};
    ex.client->expires_after(cfg.timeouts.stream_idle);
    auto [wec, wn] = co_await http::async_write_header(*ex.client, sr, nothrow);
    st.headers_sent = true;
    if (wec) co_return void(ex.keep_alive = false);

    stats_tee tee(sse);
    std::array<char, 16 * 1024> buf;
    while (!p.is_done()) {
        p.get().body().data = buf.data();
        p.get().body().size = buf.size();
        up.stream.expires_after(cfg.timeouts.stream_idle);
        auto [ec, n] = co_await http::async_read_some(up.stream, up.buffer, p, nothrow);
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t got = buf.size() - p.get().body().size;
        if (got > 0) {
            tee.feed(buf.data(), got);
            res.body().data = buf.data();
            res.body().size = got;
            res.body().more = true;
            ex.client->expires_after(cfg.timeouts.stream_idle);
            std::tie(wec, wn) = co_await http::async_write(*ex.client, sr, nothrow);
            if (wec == http::error::need_buffer) wec = {};
            out.bytes_out += got;
            if (wec) {
                st.client_gone = true;
                ex.keep_alive = false;
                co_return;
            }
        }
        if (ec) {
            if (st.client_gone) co_return void(ex.keep_alive = false);
            out.error = ec == beast::error::timeout ? api::error_kind::upstream_timeout
                                                    : api::error_kind::backend_bad_response;
            if (sse && res.chunked()) {
                const auto event = api::sse_error_event(*out.error,
                    "backend " + backend + " failed during the stream: " + ec.message());
                res.body().data = const_cast<char*>(event.data());
                res.body().size = event.size();
                res.body().more = true;
                co_await http::async_write(*ex.client, sr, nothrow);
                break;  // then end the stream properly below
            }
            ex.keep_alive = false;  // a cut body cannot be framed: close the connection
            co_return;
        }
    }
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    ex.client->expires_after(cfg.timeouts.stream_idle);
    std::tie(wec, wn) = co_await http::async_write(*ex.client, sr, nothrow);
    if (wec) ex.keep_alive = false;
    tee.finish();
    out.stats = tee.stats;
    st.upstream_reusable = p.is_done() && p.keep_alive();
}

// One try against one backend over one connection.
static awaitable<attempt> try_backend(http_server::exchange& ex, upstream::connection& up,
                                      forward_state& st, outcome& out, const config::config& cfg,
                                      const config::backend& b) {
    auto req = upstream_request(ex.request, b);
    up.stream.expires_after(cfg.timeouts.connect);
    auto [ec, n] = co_await http::async_write(up.stream, req, nothrow);
    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) {
        up.stream.expires_after(cfg.timeouts.upstream_response);
        std::tie(ec, n) = co_await http::async_read_header(up.stream, up.buffer, p, nothrow);
    }
    if (ec) {
        st.last_error = ec;
        const bool nothing_read = ec == http::error::end_of_stream || ec == net::error::eof ||
                                  ec == net::error::connection_reset || ec == net::error::broken_pipe;
        co_return up.reused && nothing_read ? attempt::stale_connection : attempt::backend_failed;
    }
    co_await relay(ex, up, p, st, out, cfg, b.name);
    co_return attempt::relayed;
}

awaitable<void> pipeline::forward(http_server::exchange& ex, outcome& out) {
    forward_state st;
    auto& pool = *pools_[ex.worker];
    auto run = [&]() -> awaitable<void> {
        for (const auto& b : cfg_.backends) {
            for (int tries = 0; tries < 2 && !st.client_gone; ++tries) {
                auto [ec, conn] = co_await pool.acquire(b.host, b.port, cfg_.timeouts.connect);
                if (ec) {
                    st.last_error = ec;
                    break;  // next backend
                }
                st.current = conn.get();
                out.backend = b.name;
                const auto result = co_await try_backend(ex, *conn, st, out, cfg_, b);
                st.current = nullptr;
                if (result == attempt::relayed) {
                    if (st.upstream_reusable && !st.client_gone) pool.release(std::move(conn));
                    co_return;
                }
                if (result == attempt::backend_failed) break;
            }
            if (st.client_gone) co_return;
        }
    };
    co_await (run() || watch_client(ex.client, &st));
    out.client_gone = st.client_gone;
    if (st.client_gone) {
        ex.keep_alive = false;
        co_return;
    }
    if (!st.headers_sent) {
        // Built before the co_await: g++ 12 mishandles temporaries of a conditional expression
        // inside a co_await (they are destroyed twice).
        const bool timeout = st.last_error == beast::error::timeout;
        const auto kind = timeout ? api::error_kind::upstream_timeout
                                  : api::error_kind::backend_unreachable;
        std::string message = "no backend could be reached: " + st.last_error.message();
        if (timeout) message = "the backend did not answer in time";
        co_await fail(ex, out, kind, std::move(message));
    }
}

}  // namespace warmslot::service
