#include "upstream/llama_client.hpp"

#include "upstream/router_call.hpp"

namespace warmslot::upstream {

namespace {

struct attempt {
    reply r;
    bool stale = false;  // the pooled connection was closed: worth one more try on a new one
};

// One try; `fresh`: on a new connection.
awaitable<attempt> call_once(pool& p, const config::backend& b, http::verb method,
                             std::string target, std::string body,
                             std::chrono::milliseconds timeout, bool fresh,
                             connection** in_flight) {
    attempt a;
    reply& r = a.r;
    auto [ec, conn] = co_await p.acquire(b.host, b.port, timeout, fresh);
    if (ec) {
        r.ec = ec;
        co_return a;
    }
    struct shown {
        connection** at;
        ~shown() {
            if (at) *at = nullptr;
        }
    } const show{in_flight};
    if (in_flight) *in_flight = conn.get();
    const bool get = method == http::verb::get;
    if (!get && !b.router_model.empty()) body = router_body(b, std::move(body));
    const bool no_load = keeps_unloaded(get, target);  // before the target is moved
    target = router_target(b, std::move(target), no_load);
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, host_header(b.host, b.port));
    if (const auto key = b.current_child_key(); !key.empty())
        req.set(http::field::authorization, "Bearer " + key);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
    req.keep_alive(true);
    conn->stream.expires_after(timeout);
    std::tie(ec, std::ignore) = co_await http::async_write(conn->stream, req, nothrow);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    if (!ec)
        std::tie(ec, std::ignore) =
            co_await http::async_read(conn->stream, conn->buffer, parser, nothrow);
    if (ec) {
        a.stale = stale(*conn, ec);
        r.ec = ec;
        co_return a;
    }
    auto res = parser.release();
    r.status = res.result_int();
    r.body = std::move(res.body());
    if (res.keep_alive()) p.release(std::move(conn));
    co_return a;
}

}  // namespace

// Sent again only when a pooled connection turned out closed before it answered: a slot save
// that timed out is never sent twice.
awaitable<reply> call(pool& p, const config::backend& b, http::verb method, std::string target,
                      std::string body, std::chrono::milliseconds timeout, connection** in_flight) {
    auto first = co_await call_once(p, b, method, target, body, timeout, false, in_flight);
    if (!first.stale) co_return std::move(first.r);
    auto again = co_await call_once(p, b, method, std::move(target), std::move(body), timeout, true,
                                    in_flight);
    co_return std::move(again.r);
}

awaitable<bool> erase_slot(pool& p, const config::backend& b, int slot,
                           std::chrono::milliseconds timeout) {
    const auto r = co_await call(p, b, http::verb::post,
                                 "/slots/" + std::to_string(slot) + "?action=erase", "{}", timeout);
    co_return !r.ec && r.status == 200;
}

}  // namespace warmslot::upstream
