#include "service/relay.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "api/errors.hpp"
#include "api/forward_headers.hpp"
#include "api/keepalive.hpp"
#include "service/keepalive.hpp"
#include "service/pipeline.hpp"
#include "sse/parser.hpp"

namespace warmslot::service {
namespace {

constexpr std::uint64_t max_buffered_body = 4 * 1024 * 1024;
constexpr const char* cached_header = "X-Warmslot-Cached-Tokens";
constexpr const char* processed_header = "X-Warmslot-Processed-Tokens";
constexpr const char* trailer_names = "X-Warmslot-Cached-Tokens, X-Warmslot-Processed-Tokens";

// Watches relayed SSE bytes for llama-server's timings; never changes them.
class sse_stats final : sse::event_sink {
  public:
    void feed(const char* data, std::size_t n) { parser_.feed(std::string_view(data, n), *this); }
    std::optional<api::prompt_stats> stats;
    // The stream's final event went by: `data: [DONE]` (OpenAI shapes), `message_stop`
    // (Messages), `response.completed` (Responses), or a "stop":true event (/completion).
    bool finished = false;

  private:
    void on_event(std::string_view name, std::string_view data, std::string_view) override {
        if (api::may_carry_stats(data)) {
            if (auto s = api::find_prompt_stats(data)) stats = s;
        }
        // Messages streams give the prompt's counts in message_start and the generated count
        // only in message_delta: without it the slot would seem to hold fewer tokens than it
        // does, and the next look at /slots would take it for someone else's.
        if (name == "message_delta" && stats && data.size() < 4096) {
            const auto delta = nlohmann::json::parse(data, nullptr, false);
            const auto* usage =
                delta.is_object() && delta.contains("usage") ? &delta["usage"] : nullptr;
            if (usage && usage->is_object() && usage->contains("output_tokens") &&
                (*usage)["output_tokens"].is_number_integer()) {
                stats->predicted = (*usage)["output_tokens"].get<long>();
            }
        }
        if (data == "[DONE]" || name == "message_stop" || name == "response.completed" ||
            (data.starts_with('{') && data.find("\"stop\":true") != std::string_view::npos)) {
            finished = true;
        }
    }
    sse::parser parser_;
};

// A client response head built as Beast builds one from the backend's end-to-end headers and
// set() calls, without its field table: fields keep their order; set() drops every
// earlier field of that name and appends. Views only: the caller keeps the values alive.
class head_builder {
  public:
    head_builder(const http::response_header<>& from, const header_list& extra,
                 std::string_view request_id)
        : result_(from.result()) {
        for (const auto& field : from) {
            const std::string_view name(field.name_string());
            if (api::forward_response_header(name)) fields_.emplace_back(name, field.value());
        }
        for (const auto& [name, value] : extra) set(name, value);
        set("X-Warmslot-Request-Id", request_id);
    }
    void set(std::string_view name, std::string_view value) {
        std::erase_if(fields_, [&](const auto& f) { return beast::iequals(f.first, name); });
        fields_.emplace_back(name, value);
    }
    unsigned status() const { return static_cast<unsigned>(result_); }
    std::string str() const {
        // The status line as serialized_head() writes it for HTTP/1.1 and this status.
        const unsigned code = static_cast<unsigned>(result_) % 1000;
        const char status_line[] = {'H',
                                    'T',
                                    'T',
                                    'P',
                                    '/',
                                    '1',
                                    '.',
                                    '1',
                                    ' ',
                                    static_cast<char>('0' + code / 100),
                                    static_cast<char>('0' + code / 10 % 10),
                                    static_cast<char>('0' + code % 10),
                                    ' '};
        const auto reason = http::obsolete_reason(result_);
        std::string head;
        head.reserve(256);
        head.append(status_line, sizeof status_line).append(reason.data(), reason.size());
        head.append("\r\n");
        for (const auto& [name, value] : fields_) {
            head.append(name).append(": ").append(value).append("\r\n");
        }
        return head.append("\r\n");
    }

  private:
    http::status result_;
    std::vector<std::pair<std::string_view, std::string_view>> fields_;
};

// Processed tokens as reported: what llama-server computed for the request itself plus what it
// computed for warmslot's priming before it (`primed`), so the sum matches llama-server's own
// prompt token count.
std::string processed_text(const api::prompt_stats& s, std::uint64_t primed) {
    return std::to_string(static_cast<std::uint64_t>(std::max(0L, s.processed)) + primed);
}

void set_stats(http::fields& f, const std::optional<api::prompt_stats>& s, std::uint64_t primed) {
    if (!s) return;
    f.set(cached_header, std::to_string(s->cached));
    f.set(processed_header, processed_text(*s, primed));
}

// The last chunk of a chunked answer, with what the cache did as trailers; after an early
// head (stream_keeper) also what that head could not carry yet.
std::string last_chunk(const outcome& out, bool early_head) {
    http::fields trailers;
    set_stats(trailers, out.stats, out.disk.primed);
    if (early_head && out.disk.primed > 0)
        trailers.set("X-Warmslot-Primed-Tokens", std::to_string(out.disk.primed));
    if (const auto d = early_head ? describe(out.disk) : std::string(); !d.empty())
        trailers.set("X-Warmslot-Disk", d);
    return http_server::serialized_last_chunk(trailers);
}

// A small non-streamed answer: read it whole, then send it with the cache headers.
awaitable<void> relay_buffered(http_server::exchange& ex, upstream::connection& up,
                               http::response_parser<http::buffer_body>& p, forward_state& st,
                               outcome& out, const config::config& cfg, const header_list& extra) {
    http::response_parser<http::string_body> whole{std::move(p)};
    whole.body_limit(max_buffered_body);
    auto [ec, n] = http_server::parse_buffered(whole, up.buffer);
    if (!ec && !whole.is_done()) {
        up.stream.expires_after(cfg.timeouts.stream_idle);
        std::tie(ec, n) = co_await http::async_read(up.stream, up.buffer, whole, nothrow);
    }
    if (ec) {
        st.last_error = ec;  // nothing reached the client yet: the caller answers with an error
        co_return;
    }
    auto& in = whole.get();
    head_builder res(in.base(), extra, ex.id);
    for (const auto& [name, value] : ex.response_headers) res.set(name, value);
    out.stats = api::may_carry_stats(in.body()) ? api::find_prompt_stats(in.body()) : std::nullopt;
    st.complete(out.stats);
    // The same order of set() calls as before: stats, keep-alive, then prepare_payload's length.
    const std::string cached = out.stats ? std::to_string(out.stats->cached) : "";
    const std::string processed = out.stats ? processed_text(*out.stats, out.disk.primed) : "";
    if (out.stats) res.set(cached_header, cached), res.set(processed_header, processed);
    if (!ex.keep_alive) res.set("Connection", "close");
    const std::string length = std::to_string(in.body().size());
    res.set("Content-Length", length);
    const std::string head = res.str();
    out.status = res.status();
    out.bytes_out = in.body().size();
    st.headers_sent = true;
    st.upstream_reusable = whole.keep_alive();
    ex.client->expires_after(cfg.limits.stalled_reader);
    const std::array<net::const_buffer, 2> response{net::buffer(head), net::buffer(in.body())};
    std::tie(ec, n) = co_await net::async_write(*ex.client, response, nothrow);
    if (ec) ex.keep_alive = false;
}

// Writes to the client in one gather write: `head` (may be empty), one piece of body in the
// response's framing (a chunk is its size in hex, CRLF, the bytes, CRLF, as Beast's make_chunk
// writes it) and `tail` (the last chunk, may be empty). What is ready together goes out
// together: one send instead of up to three.
awaitable<error_code> write_out(timed_stream& client, std::string_view head, bool chunked,
                                const char* data, std::size_t n, std::string_view tail) {
    char size[24];
    std::size_t size_length = 0;
    if (chunked && n > 0) {
        size_length = static_cast<std::size_t>(std::snprintf(size, sizeof size, "%zx\r\n", n));
    }
    const std::array<net::const_buffer, 5> buffers{
        net::buffer(head.data(), head.size()), net::buffer(size, size_length), net::buffer(data, n),
        net::buffer("\r\n", size_length > 0 ? 2 : 0), net::buffer(tail.data(), tail.size())};
    auto [ec, written] = co_await net::async_write(client, buffers, nothrow);
    co_return ec;
}

// Parses what is already buffered from the backend into `out`, without any I/O. Returns the
// body bytes produced; `ec` is set on a framing error.
std::size_t take_buffered(http::response_parser<http::buffer_body>& p, beast::flat_buffer& in,
                          std::array<char, 64 * 1024>& out, error_code& ec) {
    std::size_t produced = 0;
    while (!p.is_done() && produced < out.size() && in.size() > 0) {
        p.get().body().data = out.data() + produced;
        p.get().body().size = out.size() - produced;
        error_code pec;
        const std::size_t used = p.put(in.data(), pec);
        in.consume(used);
        produced = out.size() - p.get().body().size;
        if (pec == http::error::need_more || pec == http::error::need_buffer) break;
        if (pec) {
            ec = pec;
            break;
        }
        if (used == 0) break;
    }
    return produced;
}

}  // namespace

struct client_watch::shared {
    forward_state* st = nullptr;  // null once the watch is over
    char byte = 0;
};

client_watch::client_watch(timed_stream& client, forward_state& st)
    : client_(client), shared_(std::make_shared<shared>()) {
    shared_->st = &st;
    client_.socket().async_receive(net::buffer(&shared_->byte, 1), net::socket_base::message_peek,
                                   [s = shared_](const error_code& ec, std::size_t n) {
                                       if (!s->st || ec == net::error::operation_aborted) return;
                                       if (!ec && n > 0)
                                           return;  // the client pipelined its next request
                                       s->st->client_gone = true;
                                       if (s->st->current) {
                                           error_code ignored;
                                           s->st->current->stream.socket().close(ignored);
                                       }
                                   });
}

client_watch::~client_watch() {
    shared_->st = nullptr;
    error_code ignored;
    client_.socket().cancel(ignored);  // the exchange is over: only the peek is pending
}

watch_list::~watch_list() {
    for (entry* e = head_; e != nullptr; e = e->next_) e->list_ = nullptr;
}

watch_list::entry::entry(watch_list& list, timed_stream& client, forward_state& st)
    : list_(&list), client_(client), st_(st), since_(std::chrono::steady_clock::now()) {
    next_ = list_->head_;
    if (next_) next_->prev_ = this;
    list_->head_ = this;
    if (!list_->armed_) list_->arm();
}

watch_list::entry::~entry() {
    if (list_ != nullptr) {
        (prev_ ? prev_->next_ : list_->head_) = next_;
        if (next_) next_->prev_ = prev_;
    }
    watch_.reset();  // cancels its peek
}

void watch_list::arm() {
    armed_ = true;
    timer_.expires_after(delay);
    timer_.async_wait([this](const error_code& ec) {
        if (ec) return;  // cancelled: the list is going away
        armed_ = false;
        const auto now = std::chrono::steady_clock::now();
        for (entry* e = head_; e != nullptr; e = e->next_) {
            if (!e->watch_ && now - e->since_ >= delay) e->watch_.emplace(e->client_, e->st_);
        }
        if (head_) arm();
    });
}

namespace {

// A streamed or large answer: copied to the client chunk by chunk as it arrives.
awaitable<void> relay_streamed(http_server::exchange& ex, upstream::connection& up,
                               http::response_parser<http::buffer_body>& p, forward_state& st,
                               outcome& out, const config::config& cfg, const header_list& extra,
                               bool sse) {
    const auto& head = p.get();
    const auto length = p.content_length();
    head_builder res(head.base(), extra, ex.id);
    for (const auto& [name, value] : ex.response_headers) res.set(name, value);
    // The head went out early (stream_keeper): the body goes on in its chunks.
    const bool early = st.early_head;
    // An HTTP/1.0 client knows no chunked encoding: a body of unknown length ends where the
    // connection closes.
    const bool unknown_length = !length || p.chunked();
    const bool until_close = !early && unknown_length && ex.request.version() < 11;
    const bool chunked = early || (unknown_length && !until_close);
    const std::string length_text = length ? std::to_string(*length) : "";
    if (early) {
        // Its fields are merged into the head already sent: nothing is written twice.
    } else if (chunked) {
        res.set("Transfer-Encoding", "chunked");
        res.set("Trailer", trailer_names);
    } else if (!until_close) {
        res.set("Content-Length", length_text);
    }
    if (until_close) ex.keep_alive = false;
    if (!ex.keep_alive) res.set("Connection", "close");
    out.status = res.status();
    out.streamed = sse;
    // The head goes out with the body bytes that came with it, or alone before waiting for
    // more: it never waits on the backend.
    std::string head_bytes = early ? std::string() : res.str();
    sse_stats stats;
    // A body that is not a stream but has no length (a router passes answers on chunked): kept,
    // up to max_buffered_body, for the timings at its end.
    std::string plain;
    bool keep_plain = !sse;
    std::array<char, 64 * 1024> buf;
    error_code rec;
    std::string last;  // the last chunk with its trailers, once the body is complete
    p.eager(true);
    for (;;) {
        // Everything already received goes out in one write; then wait for more.
        const std::size_t got = p.is_done() ? 0 : take_buffered(p, up.buffer, buf, rec);
        if (got > 0 && sse) stats.feed(buf.data(), got);
        if (got > 0 && keep_plain) {
            keep_plain = plain.size() + got <= max_buffered_body;
            if (keep_plain)
                plain.append(buf.data(), got);
            else
                std::string().swap(plain);
        }
        if (p.is_done() && keep_plain && !stats.stats && api::may_carry_stats(plain))
            stats.stats = api::find_prompt_stats(plain);
        if (p.is_done()) st.complete(stats.stats);
        const bool done = p.is_done() && !rec;
        if (done) {
            out.stats = stats.stats;
            if (chunked) last = last_chunk(out, early);
        }
        if (got > 0 || !head_bytes.empty() || !last.empty()) {
            ex.client->expires_after(cfg.limits.stalled_reader);
            const auto wec =
                co_await write_out(*ex.client, head_bytes, chunked, buf.data(), got, last);
            st.headers_sent = true;
            head_bytes.clear();
            out.bytes_out += got;
            if (wec) {
                st.client_gone = true;
                out.stats = stats.stats;
                co_return void(ex.keep_alive = false);
            }
            // A client that leaves once it has the stream's final event read the whole answer.
            if (stats.finished) st.answered = true;
        }
        if (rec || done) break;
        if (got == buf.size()) continue;  // more may be parsed from what is buffered
        up.stream.expires_after(cfg.timeouts.stream_idle);
        auto [ec, n] = co_await up.stream.async_read_some(up.buffer.prepare(64 * 1024), nothrow);
        up.buffer.commit(n);
        if (ec == net::error::eof && p.need_eof()) p.put_eof(ec);
        if (ec) {
            rec = ec;
            break;
        }
    }
    if (rec) {
        if (st.client_gone) {
            out.stats = stats.stats;  // recorded by the caller: what the slot now holds
            co_return void(ex.keep_alive = false);
        }
        out.error = rec == beast::error::timeout ? api::error_kind::upstream_timeout
                                                 : api::error_kind::backend_bad_response;
        // cannot be framed
        if (!(sse && (unknown_length || early))) co_return void(ex.keep_alive = false);
        const auto event = api::sse_error_event(
            *out.error, "the backend failed during the stream: " + rec.message(),
            out.cls.ep.dialect);
        out.stats = stats.stats;
        // Built before the co_await: g++ 12 mishandles temporaries of a conditional expression
        // inside a co_await (they are destroyed twice).
        std::string tail;
        if (chunked) tail = last_chunk(out, early);
        ex.client->expires_after(cfg.limits.stalled_reader);
        const auto wec =
            co_await write_out(*ex.client, {}, chunked, event.data(), event.size(), tail);
        if (wec) ex.keep_alive = false;
    }
    // llama-server (cpp-httplib) closes its side after an answer it sent in chunks, though the
    // answer allows keep-alive: pooled, that connection would be found dead by the next request,
    // which then takes it for a sign of a restart (docs/llama-server-behaviour.md).
    st.upstream_reusable = !rec && p.is_done() && p.keep_alive() && !p.chunked();
}

// An answer that is no event stream (an error llama-server answered before its stream began,
// for a prompt too long or a model still loading) to a request whose stream head warmslot
// already sent: one error event in the API's shape, then the end. The access line gives the
// backend's status.
awaitable<void> relay_into_started(http_server::exchange& ex, upstream::connection& up,
                                   http::response_parser<http::buffer_body>& p, forward_state& st,
                                   outcome& out, const config::config& cfg) {
    http::response_parser<http::string_body> whole{std::move(p)};
    whole.body_limit(max_buffered_body);
    auto [ec, n] = http_server::parse_buffered(whole, up.buffer);
    if (!ec && !whole.is_done()) {
        up.stream.expires_after(cfg.timeouts.stream_idle);
        std::tie(ec, n) = co_await http::async_read(up.stream, up.buffer, whole, nothrow);
    }
    const unsigned status = whole.get().result_int();
    std::string event;
    if (ec) {
        event = api::sse_error_event(api::error_kind::backend_bad_response,
                                     "the backend's answer could not be read: " + ec.message(),
                                     out.cls.ep.dialect);
    } else {
        event = api::sse_error_of_answer(status, whole.get().body(), out.cls.ep.dialect);
    }
    out.status = !ec && status >= 400 ? status : 502;
    if (out.status == 502) out.error = api::error_kind::backend_bad_response;
    st.complete(std::nullopt);
    st.upstream_reusable = !ec && whole.keep_alive();
    const std::string tail = last_chunk(out, true);
    ex.client->expires_after(cfg.timeouts.stream_idle);
    const auto wec = co_await write_out(*ex.client, {}, true, event.data(), event.size(), tail);
    st.headers_sent = true;
    out.bytes_out += event.size();
    if (wec) ex.keep_alive = false;
}

}  // namespace

// Not a coroutine itself: it hands over the coroutine that relays, without a frame of its own.
awaitable<void> relay(http_server::exchange& ex, upstream::connection& up,
                      http::response_parser<http::buffer_body>& p, forward_state& st, outcome& out,
                      const config::config& cfg, const header_list& extra) {
    const bool sse = p.get()[http::field::content_type].starts_with("text/event-stream");
    if (st.early_head) {
        if (sse && p.get().result() == http::status::ok) {
            return relay_streamed(ex, up, p, st, out, cfg, extra, true);
        }
        return relay_into_started(ex, up, p, st, out, cfg);
    }
    const auto length = p.content_length();
    if (!sse && length && !p.chunked() && *length <= max_buffered_body) {
        return relay_buffered(ex, up, p, st, out, cfg, extra);
    }
    return relay_streamed(ex, up, p, st, out, cfg, extra, sse);
}

}  // namespace warmslot::service
