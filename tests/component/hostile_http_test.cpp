// What a hostile or broken HTTP client can do to warmslot's server, seen from a raw socket:
// endless chunk lines and trailers, many tiny headers, bodies without a key, clients that keep
// sending after an error answer, too many connections, slow senders and readers, a drain, and
// HTTP/1.0. The server, pipeline and a stub backend run in this process on loopback port 0;
// every wait is bounded.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "component_config.hpp"
#include "http/server.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"
#include "stub_upstream.hpp"

namespace warmslot {
namespace {

using namespace std::chrono_literals;
using testing::stub_upstream;
using clock_type = std::chrono::steady_clock;

// --- warmslot in this process --------------------------------------------------------------

config::config make_config(std::uint16_t backend_port) {
    config::backend b;
    b.name = "stub";
    b.url = "http://127.0.0.1:" + std::to_string(backend_port);
    b.host = "127.0.0.1";
    b.port = backend_port;
    auto c = testing::component_config({b});
    c.timeouts.client_idle = 30s;
    return c;
}

struct proxy {
    explicit proxy(config::config c)
        : cfg(std::move(c)),
          workers(2),
          registry({"stub"}, routing::planner_settings{}),
          pipeline(cfg, workers, registry),
          server(
              cfg, workers, [this](http_server::exchange& ex) { return pipeline.handle(ex); },
              [this](const http::request_header<>& h) { return pipeline.admits(h); }) {
        server.listen();
        workers.start();
    }
    ~proxy() {
        server.stop(2s);
        workers.join();
    }
    config::source cfg;
    http_server::workers workers;
    routing::registry registry;
    service::pipeline pipeline;
    http_server::server server;
};

// --- a raw client: a non-blocking socket, every operation with a deadline ------------------

class raw {
  public:
    explicit raw(std::uint16_t port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(fd_ >= 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    }
    ~raw() { close(); }
    raw(const raw&) = delete;
    raw& operator=(const raw&) = delete;
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    // Writes all of `bytes`; false when the connection broke or the deadline passed.
    bool send(std::string_view bytes, std::chrono::milliseconds deadline = 5000ms) {
        const auto end = clock_type::now() + deadline;
        while (!bytes.empty()) {
            const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n > 0) {
                bytes.remove_prefix(static_cast<std::size_t>(n));
                sent += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
            if (!wait(POLLOUT, end)) return false;
        }
        return true;
    }
    // Reads what is there, waiting until `deadline` for something. False at EOF or an error
    // (`ended` tells which happened).
    bool read_some(std::chrono::milliseconds deadline = 5000ms) {
        const auto end = clock_type::now() + deadline;
        for (;;) {
            char buf[16384];
            const auto n = ::recv(fd_, buf, sizeof buf, 0);
            if (n > 0) {
                received.append(buf, static_cast<std::size_t>(n));
                return true;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                ended = true;
                reset = n < 0;
                return false;
            }
            if (!wait(POLLIN, end)) return false;
        }
    }
    // Reads until the peer closes (true) or the deadline passes (false).
    bool read_to_end(std::chrono::milliseconds deadline = 5000ms) {
        const auto end = clock_type::now() + deadline;
        while (!ended && clock_type::now() < end) {
            read_some(
                std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now()));
        }
        return ended;
    }
    // Reads until `received` holds `text` (true), or EOF or the deadline (false).
    bool read_until(std::string_view text, std::chrono::milliseconds deadline = 5000ms) {
        const auto end = clock_type::now() + deadline;
        while (received.find(text) == std::string::npos) {
            if (ended || clock_type::now() >= end) return false;
            read_some(
                std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now()));
        }
        return true;
    }
    // Whether the socket is readable now (data, EOF or an error) without reading.
    bool readable(std::chrono::milliseconds within = 0ms) {
        return wait(POLLIN, clock_type::now() + within);
    }

    std::string received;
    std::size_t sent = 0;
    bool ended = false;
    bool reset = false;

  private:
    bool wait(short events, clock_type::time_point end) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now());
        pollfd p{fd_, events, 0};
        return ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) > 0;
    }
    int fd_ = -1;
};

unsigned status_of(const std::string& response) {
    if (response.size() < 12 || !response.starts_with("HTTP/1.")) return 0;
    return static_cast<unsigned>(std::stoi(response.substr(9, 3)));
}

std::string head_of(const std::string& response) {
    return response.substr(0, response.find("\r\n\r\n") + 4);
}

std::string body_of(const std::string& response) {
    const auto at = response.find("\r\n\r\n");
    return at == std::string::npos ? "" : response.substr(at + 4);
}

// The first response is an OpenAI-shaped error with this status.
void check_error(const std::string& response, unsigned status) {
    CAPTURE(response.substr(0, 400));
    REQUIRE(status_of(response) == status);
    const auto head = head_of(response);
    const auto length_at = head.find("Content-Length: ");
    REQUIRE(length_at != std::string::npos);
    const auto length = std::stoul(head.substr(length_at + 16));
    const auto doc = nlohmann::json::parse(body_of(response).substr(0, length), nullptr, false);
    REQUIRE(doc.is_object());
    CHECK(doc["error"]["code"] == status);
    CHECK(doc["error"]["message"].is_string());
    CHECK(doc["error"]["type"].is_string());
}

const std::string chunked_post =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Content-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto end = clock_type::now() + timeout;
    while (!pred()) {
        if (clock_type::now() >= end) return false;
        std::this_thread::sleep_for(2ms);  // poll interval, not a wait for an outcome
    }
    return true;
}

bool eventually_below(const proxy& p, std::size_t connections) {
    return eventually([&] { return p.server.connections() < connections; }, 2000ms);
}

// Sends `piece` again and again (up to `most` bytes) until the server answers or closes.
// Returns the bytes sent by then.
std::size_t flood_until_answered(raw& c, const std::string& piece, std::size_t most) {
    while (c.sent < most && !c.readable()) {
        if (!c.send(piece, 2000ms)) break;
    }
    return c.sent;
}

}  // namespace

TEST_CASE("an endless chunk extension or trailer section is refused with 400 early") {
    stub_upstream stub;
    proxy p(make_config(stub.port()));
    const std::string ext(64 * 1024, 'e');
    SUBCASE("chunk extension") {
        raw c(p.server.port());
        REQUIRE(c.send(chunked_post + "1;"));
        const auto sent = flood_until_answered(c, ext, 64u << 20);
        CHECK(sent < (8u << 20));  // the buffer limit plus what the socket buffers hold
        REQUIRE(c.read_until("\r\n\r\n"));
        check_error(c.received, 400);
    }
    SUBCASE("trailers") {
        raw c(p.server.port());
        REQUIRE(c.send(chunked_post + "2\r\n{}\r\n0\r\n"));
        std::string trailer;
        for (int i = 0; i < 1000; ++i) trailer += "X-T: " + std::string(60, 't') + "\r\n";
        const auto sent = flood_until_answered(c, trailer, 64u << 20);
        CHECK(sent < (8u << 20));
        REQUIRE(c.read_until("\r\n\r\n"));
        check_error(c.received, 400);
    }
    CHECK(stub.seen().requests.empty());
}

TEST_CASE("many tiny headers get 431") {
    stub_upstream stub;
    proxy p(make_config(stub.port()));
    std::string req = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (int i = 0; i < 200; ++i) req += "a" + std::to_string(i) + ": b\r\n";  // far under 16 KiB
    raw c(p.server.port());
    REQUIRE(c.send(req + "\r\n"));
    REQUIRE(c.read_to_end());
    check_error(c.received, 431);
    CHECK(stub.seen().requests.empty());

    raw ok(p.server.port());  // the default of 100 leaves room for real clients
    std::string fine = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    for (int i = 0; i < 90; ++i) fine += "a" + std::to_string(i) + ": b\r\n";
    REQUIRE(ok.send(fine + "\r\n"));
    REQUIRE(ok.read_to_end());
    CHECK(status_of(ok.received) == 200);
}

TEST_CASE("a body without a valid key is never read: 401 before 100 Continue or the body") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.api_keys = {"sk-right-key"};
    proxy p(std::move(cfg));
    const std::string head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 50000000\r\n";

    SUBCASE("Expect: 100-continue without a key: 401 at once, no 100") {
        raw c(p.server.port());
        REQUIRE(c.send(head + "Expect: 100-continue\r\n\r\n"));
        REQUIRE(c.read_to_end());
        CHECK(c.received.find("100 Continue") == std::string::npos);
        check_error(c.received, 401);
        CHECK(head_of(c.received).find("Connection: close") != std::string::npos);
        CHECK(stub.seen().requests.empty());
    }
    SUBCASE("Expect: 100-continue with the key: 100, then the answer") {
        raw c(p.server.port());
        const std::string body = R"({"messages":[]})";
        REQUIRE(
            c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Authorization: Bearer sk-right-key\r\nExpect: 100-continue\r\n"
                   "Content-Type: application/json\r\nConnection: close\r\n"
                   "Content-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n"));
        REQUIRE(c.read_until("HTTP/1.1 100 Continue\r\n\r\n"));
        REQUIRE(c.send(body));
        REQUIRE(c.read_to_end());
        CHECK(status_of(c.received.substr(c.received.find("\r\n\r\n") + 4)) == 200);
    }
    SUBCASE("no Expect, no key: 401 long before 50 MB are sent") {
        raw c(p.server.port());
        REQUIRE(c.send(head + "\r\n"));
        const auto sent = flood_until_answered(c, std::string(64 * 1024, 'x'), 50'000'000);
        CHECK(sent < 10'000'000);
        REQUIRE(c.read_until("\r\n\r\n"));
        check_error(c.received, 401);
        CHECK(stub.seen().requests.empty());
    }
}

TEST_CASE("a client that goes on sending after an error answer still reads the answer") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.limits.max_body_bytes = 1024;
    proxy p(std::move(cfg));
    raw c(p.server.port());
    // Like a client that writes its whole request before it reads: 4 MiB, not one byte read.
    const std::string body(4u << 20, 'x');
    const bool all_sent = c.send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    CHECK(all_sent);  // the server read and discarded the rest instead of resetting
    REQUIRE(c.read_to_end());
    CHECK(!c.reset);
    check_error(c.received, 413);
}

TEST_CASE("over max_connections: 503 with Retry-After, then served again below it") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.limits.max_connections = 2;
    proxy p(std::move(cfg));
    const std::string get = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    raw a(p.server.port()), b(p.server.port());
    for (raw* c : {&a, &b}) {
        REQUIRE(c->send(get));
        REQUIRE(c->read_until("}"));  // answered, kept alive
    }
    raw over(p.server.port());
    REQUIRE(over.send(get));
    REQUIRE(over.read_to_end());
    check_error(over.received, 503);
    CHECK(head_of(over.received).find("Retry-After: 1\r\n") != std::string::npos);
    CHECK(head_of(over.received).find("Connection: close\r\n") != std::string::npos);

    a.close();
    REQUIRE(eventually_below(p, 2));
    raw again(p.server.port());
    REQUIRE(again.send("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    REQUIRE(again.read_to_end());
    CHECK(status_of(again.received) == 200);
}

TEST_CASE("a client sending its headers byte by byte is cut at header_read") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.timeouts.header_read = 500ms;
    proxy p(std::move(cfg));
    raw c(p.server.port());
    const std::string slow =
        "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(400, 's');
    const auto start = clock_type::now();
    std::size_t i = 0;
    while (i < slow.size() && c.send(slow.substr(i, 1))) {
        ++i;
        if (c.readable(50ms)) break;  // one byte every 50 ms, until the server gives up
    }
    REQUIRE(c.read_to_end());
    const auto took = clock_type::now() - start;
    CHECK(i < slow.size());  // cut while it was still sending
    CHECK(took >= 500ms);
    CHECK(took < 4s);
    CHECK(stub.seen().requests.empty());
}

TEST_CASE("a client that never reads a long stream is cut at limits.stalled_reader") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.timeouts.stream_idle = 60s;  // the backend's silence; it is never silent here
    cfg.limits.stalled_reader = 500ms;
    proxy p(std::move(cfg));
    raw c(p.server.port());
    constexpr int events = 1'000'000;  // about 100 MB: far more than socket buffers hold
    REQUIRE(
        c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Type: application/json\r\nX-Stub-Behaviour: sse\r\n"
               "X-Stub-Events: " +
               std::to_string(events) +
               "\r\nContent-Length: 15\r\n\r\n"
               R"({"messages":[]})"));
    // The request ends although the client reads nothing, and the backend is let go.
    CHECK(stub.wait_until([](const testing::stub_state& s) { return s.streams_cut == 1; }, 20s));
    CHECK(eventually([&] { return p.server.active_requests() == 0; }, 5000ms));
    // warmslot stopped reading from the backend when the client stopped reading: what the
    // backend wrote is bounded by socket buffers, not the length of the stream.
    const auto written = stub.seen().events_sent;
    CAPTURE(written);
    CHECK(written < 400'000);  // 40 MB: twice what the four socket buffers can hold
    c.read_to_end(10s);
    CHECK(c.ended);
    CHECK(c.received.size() < 40'000'000);
}

TEST_CASE("a drain closes idle kept-alive connections and answers late requests with close") {
    stub_upstream stub;
    auto cfg = make_config(stub.port());
    cfg.timeouts.client_idle = 60s;
    proxy p(std::move(cfg));
    const auto port = p.server.port();

    raw stream(port);  // a stream running when the drain starts
    REQUIRE(
        stream.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/json\r\nX-Stub-Behaviour: gated_sse\r\n"
                    "Content-Length: 15\r\n\r\n{\"messages\":[]}"));
    REQUIRE(stream.read_until("tok1"));
    raw idle(port);  // kept alive after one answer, waiting for its next request
    REQUIRE(idle.send("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    REQUIRE(idle.read_until("}"));
    const std::string body = R"({"messages":[]})";
    raw late(port);  // its header is read; its body comes during the drain
    REQUIRE(
        late.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Expect: 100-continue\r\n"
                  "Content-Type: application/json\r\nContent-Length: 15\r\n\r\n"));
    REQUIRE(late.read_until("100 Continue\r\n\r\n"));
    late.received.clear();

    const auto drain_start = clock_type::now();
    p.server.stop(10s);
    CHECK(idle.read_to_end(3s));  // closed at once, not after client_idle
    CHECK(clock_type::now() - drain_start < 3s);
    REQUIRE(late.send(body));
    REQUIRE(late.read_to_end());
    CHECK(status_of(late.received) == 200);
    CHECK(head_of(late.received).find("Connection: close\r\n") != std::string::npos);
    stub.open_gate();
    REQUIRE(stream.read_to_end());
    CHECK(stream.received.find("[DONE]") != std::string::npos);
    CHECK(stream.received.ends_with("\r\n\r\n"));  // the last chunk: the stream finished
}

TEST_CASE("HTTP/1.0 clients get no chunked encoding") {
    stub_upstream stub;
    proxy p(make_config(stub.port()));
    SUBCASE("a JSON answer has a Content-Length") {
        raw c(p.server.port());
        REQUIRE(c.send("GET /v1/models HTTP/1.0\r\n\r\n"));
        REQUIRE(c.read_to_end());
        CHECK(status_of(c.received) == 200);
        CHECK(head_of(c.received).find("Content-Length: ") != std::string::npos);
        CHECK(head_of(c.received).find("chunked") == std::string::npos);
        CHECK(body_of(c.received) == stub_upstream::json_body());
    }
    SUBCASE("a stream ends where the connection closes") {
        raw c(p.server.port());
        REQUIRE(
            c.send("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                   "X-Stub-Behaviour: sse\r\nContent-Length: 15\r\n\r\n{\"messages\":[]}"));
        REQUIRE(c.read_to_end());
        CAPTURE(c.received);
        CHECK(status_of(c.received) == 200);
        const auto head = head_of(c.received);
        CHECK(head.find("Transfer-Encoding") == std::string::npos);
        CHECK(head.find("Content-Length") == std::string::npos);
        CHECK(head.find("Connection: close\r\n") != std::string::npos);
        CHECK(body_of(c.received) == stub_upstream::sse_stream(3));
    }
}

}  // namespace warmslot
