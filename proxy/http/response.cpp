// Writing answers: a response's head as Beast would serialize it, a string-bodied response in
// one gather write, and warmslot's own JSON answers. See server.hpp.
#include <fmt/format.h>

#include <array>
#include <tuple>

#include "http/server.hpp"

namespace warmslot::http_server {
namespace {

void append_fields(std::string& head, const http::fields& fields) {
    for (const auto& f : fields) {
        head.append(f.name_string().data(), f.name_string().size());
        head.append(": ", 2);
        head.append(f.value().data(), f.value().size());
        head.append("\r\n", 2);
    }
    head.append("\r\n", 2);
}

// An answer warmslot writes itself: JSON with data about the server or its clients, never to be
// cached or read as anything else.
http::response<http::string_body> json_response(unsigned status, std::string body, bool keep_alive,
                                                const std::string& request_id) {
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
