// Reading one request under the configured limits and deadlines, handing it to the handler, and
// the answers to what is refused before it gets there (each counted, with one access line).
// See server.hpp (serve_one, read_body).
#include <fmt/format.h>

#include <tuple>

#include "api/errors.hpp"
#include "http/server.hpp"
#include "http/server_log.hpp"
#include "util/escape.hpp"

namespace warmslot::http_server {
namespace {

using namespace server_detail;

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
        note_refusal(counts, stream, refusal::headers_too_large, api::error_kind::headers_too_large,
                     id, nullptr, cfg);
        co_await answer_error(stream, api::error_kind::headers_too_large,
                              "request headers are too large", id, cfg);
    } else if (ec == http::error::body_limit) {  // a declared Content-Length over the limit
        // The header is whole when its Content-Length is found over the limit.
        note_refusal(counts, stream, refusal::body_too_large, api::error_kind::payload_too_large,
                     id, &head, cfg);
        co_await answer_error(
            stream, api::error_kind::payload_too_large,
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

}  // namespace

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
        std::tie(ec, std::ignore) =
            co_await http::async_read_header(stream, buffer, parser, nothrow);
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
        co_await answer_error(
            stream, api::error_kind::headers_too_large,
            fmt::format("request has more than {} header fields", cfg->limits.max_header_count), id,
            *cfg);
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
        message =
            fmt::format("request body is over the limit of {} bytes", cfg.limits.max_body_bytes);
    } else if (ec == http::error::buffer_overflow) {
        kind = api::error_kind::bad_request;
        why = refusal::chunk_line_too_long;
        message = fmt::format(
            "a chunk-size line or the trailer section is over the limit of "
            "{} bytes",
            buffer.max_size());
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

}  // namespace warmslot::http_server
