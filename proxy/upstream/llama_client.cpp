#include "upstream/llama_client.hpp"

namespace warmslot::upstream {

awaitable<reply> call(pool& p, const config::backend& b, http::verb method, std::string target,
                      std::string body, std::chrono::milliseconds timeout) {
    reply r;
    auto [ec, conn] = co_await p.acquire(b.host, b.port, timeout);
    if (ec) {
        r.ec = ec;
        co_return r;
    }
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, conn->key);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    req.keep_alive(true);
    conn->stream.expires_after(timeout);
    std::tie(ec, std::ignore) = co_await http::async_write(conn->stream, req, nothrow);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    if (!ec) std::tie(ec, std::ignore) = co_await http::async_read(conn->stream, conn->buffer, parser, nothrow);
    if (ec && conn->reused) {  // a kept-alive connection the peer had closed: once more, fresh
        std::string again = std::move(req.body());
        co_return co_await call(p, b, method, std::move(target), std::move(again), timeout);
    }
    if (ec) {
        r.ec = ec;
        co_return r;
    }
    auto res = parser.release();
    r.status = res.result_int();
    r.body = std::move(res.body());
    if (res.keep_alive()) p.release(std::move(conn));
    co_return r;
}

}  // namespace warmslot::upstream
