#include "stub_upstream.hpp"

#include <array>
#include <boost/asio/write.hpp>
#include <cctype>
#include <string>
#include <tuple>

namespace warmslot::testing {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

int int_header(const http::request<http::string_body>& req, std::string_view name, int fallback) {
    const auto it = req.find(name);
    if (it == req.end()) return fallback;
    try {
        return std::stoi(std::string(it->value()));
    } catch (const std::exception&) {
        return fallback;
    }
}

}  // namespace

std::string recorded_request::value(const std::string& lower_name) const {
    const auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

stub_upstream::stub_upstream() {
    const tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    net::co_spawn(ctx_, accept_loop(), net::detached);
    thread_ = std::thread([this] { ctx_.run(); });
}

stub_upstream::~stub_upstream() {
    ctx_.stop();
    thread_.join();
    // Coroutines still suspended (held streams, keep-alive reads) are destroyed with ctx_,
    // which closes their sockets.
}

stub_state stub_upstream::seen() const {
    std::lock_guard lock(mutex_);
    return state_;
}

bool stub_upstream::wait_until(const std::function<bool(const stub_state&)>& pred,
                               std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return pred(state_); });
}

template <typename F>
void stub_upstream::update(F f) {
    {
        std::lock_guard lock(mutex_);
        f(state_);
    }
    changed_.notify_all();
}

void stub_upstream::open_gate() {
    net::post(ctx_, [this] {
        gate_open_ = true;
        gate_.cancel();
    });
}

std::string stub_upstream::json_body() {
    return R"({"id":"chatcmpl-stub","object":"chat.completion","model":"stub",)"
           R"("choices":[{"index":0,"finish_reason":"stop",)"
           R"("message":{"role":"assistant","content":"hello"}}],)"
           R"("usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13},)"
           R"("timings":{"cache_n":5,"prompt_n":7,"prompt_ms":1.5}})";
}

std::string stub_upstream::sse_event(int i, int n) {
    if (i == n) {
        return R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],)"
               R"("object":"chat.completion.chunk","timings":{"cache_n":5,"prompt_n":7}})"
               "\n\n";
    }
    return R"(data: {"choices":[{"index":0,"delta":{"content":"tok)" + std::to_string(i) +
           R"("}}],"object":"chat.completion.chunk"})" + "\n\n";
}

std::string stub_upstream::sse_stream(int n) {
    std::string out;
    for (int i = 1; i <= n; ++i) out += sse_event(i, n);
    return out + "data: [DONE]\n\n";
}

void stub_upstream::record(const http::request<http::string_body>& req) {
    recorded_request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.body = req.body();
    for (const auto& field : req) {
        r.headers.emplace(lower(field.name_string()), std::string(field.value()));
    }
    update([&](stub_state& s) { s.requests.push_back(std::move(r)); });
}

awaitable<void> stub_upstream::accept_loop() {
    for (;;) {
        auto [ec, socket] = co_await acceptor_.async_accept(nothrow);
        if (ec) co_return;
        update([](stub_state& s) { ++s.connections_accepted; });
        net::co_spawn(ctx_, session(std::move(socket)), net::detached);
    }
}

awaitable<void> stub_upstream::session(tcp::socket socket) {
    beast::flat_buffer buffer;
    for (;;) {
        http::request<http::string_body> req;
        auto [ec, n] = co_await http::async_read(socket, buffer, req, nothrow);
        if (ec) co_return;
        record(req);
        if (!co_await respond(socket, req)) co_return;
    }
}

// Answers one request; returns whether the connection may carry another.
awaitable<bool> stub_upstream::respond(tcp::socket& socket,
                                       const http::request<http::string_body>& req) {
    std::string behaviour = "json";
    if (const auto it = req.find("X-Stub-Behaviour"); it != req.end()) {
        behaviour = std::string(it->value());
    }
    if (req.target() == "/health") behaviour = "json";
    // warmslot's own calls (upstream::call) send no test headers: a target can ask instead.
    if (std::string_view(req.target()).ends_with("stub=silent")) behaviour = "silent";
    if (behaviour == "silent") {
        co_await wait_for_peer_close(socket);
        co_return false;
    }
    if (behaviour != "json") {
        const int events = int_header(req, "X-Stub-Events", 3);
        const auto delay = std::chrono::milliseconds(int_header(req, "X-Stub-Delay-Ms", 0));
        co_return co_await stream(socket, behaviour, events, delay);
    }
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set(http::field::server, "stub");
    res.body() = req.target() == "/health" ? std::string(R"({"status":"ok"})") : json_body();
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(socket, res, nothrow);
    co_return !ec && req.keep_alive();
}

awaitable<bool> stub_upstream::stream(tcp::socket& socket, std::string behaviour, int events,
                                      std::chrono::milliseconds delay) {
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "text/event-stream");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    auto [ec, n] = co_await http::async_write_header(socket, sr, nothrow);
    net::steady_timer timer(ctx_);
    for (int i = 1; !ec && i <= events; ++i) {
        if (i > 1 && delay.count() > 0) {
            timer.expires_after(delay);
            co_await timer.async_wait(nothrow);
        }
        if (i == 2 && behaviour == "gated_sse" && !gate_open_) {
            co_await gate_.async_wait(nothrow);
        }
        const std::string event = sse_event(i, events);
        std::tie(ec, n) =
            co_await net::async_write(socket, http::make_chunk(net::buffer(event)), nothrow);
        if (!ec) update([](stub_state& s) { ++s.events_sent; });
        if (i == 1 && behaviour == "hold") {
            if (!ec) co_await wait_for_peer_close(socket);
            co_return false;
        }
        if (i == 2 && behaviour == "drop") {
            error_code ignored;
            socket.shutdown(tcp::socket::shutdown_both, ignored);
            socket.close(ignored);
            co_return false;
        }
    }
    if (ec) {
        update([](stub_state& s) { ++s.streams_cut; });
        co_return false;
    }
    const std::string done = "data: [DONE]\n\n";
    std::tie(ec, n) =
        co_await net::async_write(socket, http::make_chunk(net::buffer(done)), nothrow);
    if (!ec) std::tie(ec, n) = co_await net::async_write(socket, http::make_chunk_last(), nothrow);
    co_return !ec;
}

// Reads until the peer closes (or resets) the connection, and counts it.
awaitable<void> stub_upstream::wait_for_peer_close(tcp::socket& socket) {
    std::array<char, 256> sink;
    for (;;) {
        auto [ec, n] = co_await socket.async_read_some(net::buffer(sink), nothrow);
        if (ec) break;
    }
    update([](stub_state& s) { ++s.peer_closed; });
}

std::uint16_t unused_port() {
    net::io_context ctx;
    tcp::acceptor a(ctx, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    const auto port = a.local_endpoint().port();
    a.close();
    return port;
}

}  // namespace warmslot::testing
