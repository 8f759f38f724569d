// The proxy as a client sees it: warmslot's workers, pipeline and server on loopback port 0,
// a stub backend, and a plain Beast client, all in this process. No fixed sleeps: every wait
// has a deadline and ends as soon as its condition holds.
#include <doctest/doctest.h>

#include <boost/asio/write.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "component_config.hpp"
#include "eventually.hpp"
#include "http/server.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"
#include "stub_upstream.hpp"

namespace warmslot {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::stub_upstream;
using response = http::response<http::string_body>;
using request = http::request<http::string_body>;
using stream_parser = http::response_parser<http::string_body>;

constexpr auto op_deadline = 5s;  // any single client operation

// --- waiting and leak checks ---------------------------------------------------------------

std::size_t open_fds() {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry :
         std::filesystem::directory_iterator("/proc/self/fd")) {
        ++n;
    }
    return n;
}

std::size_t thread_count() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.starts_with("Threads:")) return std::stoul(line.substr(8));
    }
    return 0;
}

// Declared first in a test, checked last: every thread and socket the test made is gone.
struct leak_check {
    std::size_t fds = open_fds();
    std::size_t threads = thread_count();
    leak_check() { REQUIRE((fds > 0 && threads > 0)); }  // the counts are real, not zero
    ~leak_check() {
        CHECK(eventually([&] { return open_fds() <= fds && thread_count() <= threads; }, 2s));
    }
};

// --- warmslot in this process --------------------------------------------------------------

config::backend backend_at(std::string name, std::uint16_t port) {
    config::backend b;
    b.name = std::move(name);
    b.url = "http://127.0.0.1:" + std::to_string(port);
    b.host = "127.0.0.1";
    b.port = port;
    return b;
}

std::vector<std::string> backend_names(const config::config& c) {
    std::vector<std::string> names;
    for (const auto& b : c.backends) names.push_back(b.name);
    return names;
}

config::config make_config(std::vector<config::backend> backends) {
    return testing::component_config(std::move(backends));
}

// No backend monitor runs here: the registry learns nothing about slots, so requests are
// placed as they come (the failover order), which is what these tests are about.
struct proxy_under_test {
    explicit proxy_under_test(config::config c)
        : cfg(std::move(c)),
          workers(2),
          registry(backend_names(*cfg.current()), routing::planner_settings{}),
          pipeline(cfg, workers, registry),
          server(cfg, workers, [this](http_server::exchange& ex) { return pipeline.handle(ex); }) {
        server.listen();
        workers.start();
    }
    ~proxy_under_test() {
        server.stop(2s);  // drains, then stops the workers
        workers.join();
    }
    std::uint16_t port() const { return server.port(); }

    config::source cfg;
    http_server::workers workers;
    routing::registry registry;
    service::pipeline pipeline;
    http_server::server server;
};

// --- a plain Beast client, one deadline per operation --------------------------------------

class client {
  public:
    explicit client(std::uint16_t port) {
        error_code result;
        stream_.expires_after(op_deadline);
        stream_.async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                              [&](error_code ec) { result = ec; });
        drive();
        REQUIRE_MESSAGE(!result, result.message());
    }
    error_code send(request req) {
        return run([&](auto done) { http::async_write(stream_, req, done); });
    }
    error_code send_raw(const std::string& bytes) {
        return run([&](auto done) { net::async_write(stream_, net::buffer(bytes), done); });
    }
    error_code read_header(stream_parser& p) {
        return run([&](auto done) { http::async_read_header(stream_, buffer_, p, done); });
    }
    // Reads until `enough(body)` holds, the response is complete, or an error.
    error_code read_until(stream_parser& p, const std::function<bool(const std::string&)>& enough) {
        while (!p.is_done() && !enough(p.get().body())) {
            auto ec = run([&](auto done) { http::async_read_some(stream_, buffer_, p, done); });
            if (ec) return ec;
        }
        return {};
    }
    response exchange(request req) {
        stream_parser p;
        auto ec = send(std::move(req));
        if (!ec) ec = read_header(p);
        if (!ec) ec = read_until(p, [](const std::string&) { return false; });
        REQUIRE_MESSAGE(!ec, ec.message());
        return p.release();
    }
    void close() { stream_.close(); }

  private:
    template <typename Start>
    error_code run(Start start) {
        error_code result;
        stream_.expires_after(op_deadline);
        start([&](error_code ec, std::size_t) { result = ec; });
        drive();
        return result;
    }
    void drive() {
        ctx_.restart();
        ctx_.run();
    }
    net::io_context ctx_{1};
    beast::tcp_stream stream_{ctx_};
    beast::flat_buffer buffer_;
};

request make_request(http::verb method, std::string target, std::string body = "",
                     std::string behaviour = "") {
    request req{method, target, 11};
    req.set(http::field::host, "localhost");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    if (!behaviour.empty()) req.set("X-Stub-Behaviour", behaviour);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
}

request chat(std::string behaviour = "", std::string body = R"({"messages":[]})") {
    return make_request(http::verb::post, "/v1/chat/completions", std::move(body),
                        std::move(behaviour));
}

response roundtrip(std::uint16_t port, request req) {
    client c(port);
    return c.exchange(std::move(req));
}

void check_openai_error(const response& res, unsigned status) {
    CAPTURE(res.body());
    CHECK(res.result_int() == status);
    CHECK(std::string_view(res[http::field::content_type]).starts_with("application/json"));
    const auto doc = nlohmann::json::parse(res.body(), nullptr, false);
    REQUIRE(doc.is_object());
    REQUIRE(doc.contains("error"));
    const auto& e = doc["error"];
    REQUIRE(e.is_object());
    CHECK(e.size() == 3);
    CHECK((e.contains("message") && e["message"].is_string() &&
           !e["message"].get<std::string>().empty()));
    CHECK((e.contains("type") && e["type"].is_string() && !e["type"].get<std::string>().empty()));
    CHECK((e.contains("code") && e["code"] == status));
}

// A stream body that is `sent`, then exactly one SSE event: its JSON data.
nlohmann::json error_event_after(const std::string& body, const std::string& sent) {
    REQUIRE(body.starts_with(sent));
    const std::string rest = body.substr(sent.size());
    CAPTURE(rest);
    REQUIRE(rest.starts_with("data: "));
    REQUIRE(rest.ends_with("\n\n"));
    CHECK(rest.find("\n\n") == rest.size() - 2);  // exactly one event
    auto doc = nlohmann::json::parse(rest.substr(6, rest.size() - 8), nullptr, false);
    REQUIRE(doc.is_object());
    return doc;
}

}  // namespace

// --- 1. plain JSON --------------------------------------------------------------------------

TEST_CASE("a JSON response passes through unchanged, with warmslot's headers") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub-a", stub.port())}));
    const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"n_predict":1})";

    const auto res = roundtrip(proxy.port(), chat("json", body));

    CHECK(res.result_int() == 200);
    CHECK(res.body() == stub_upstream::json_body());
    CHECK(res["X-Warmslot-Backend"] == "stub-a");
    CHECK(!res["X-Warmslot-Request-Id"].empty());
    CHECK(res[http::field::content_type] == "application/json; charset=utf-8");
    CHECK(res[http::field::server] != "stub");  // hop-by-hop and server identity stay upstream
    const auto seen = stub.seen();
    REQUIRE(seen.requests.size() == 1);
    CHECK(seen.requests[0].method == "POST");
    CHECK(seen.requests[0].target == "/v1/chat/completions");
    CHECK(seen.requests[0].body == body);
}

// --- 2. SSE event by event ------------------------------------------------------------------

TEST_CASE("an SSE stream is relayed event by event, byte for byte") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    client c(proxy.port());
    auto req = chat("gated_sse", R"({"messages":[],"stream":true})");
    req.set("X-Stub-Events", "4");
    req.set("X-Stub-Delay-Ms", "5");
    REQUIRE(!c.send(req));

    stream_parser p;
    REQUIRE(!c.read_header(p));
    CHECK(p.get().result_int() == 200);
    CHECK(p.get()[http::field::content_type] == "text/event-stream");
    CHECK(p.chunked());
    // The stub sends nothing past event 1 until the gate opens: receiving event 1 here proves
    // the proxy did not hold it back.
    const std::string first = stub_upstream::sse_event(1, 4);
    REQUIRE(!c.read_until(p, [&](const std::string& b) { return b.size() >= first.size(); }));
    CHECK(p.get().body() == first);
    stub.open_gate();
    REQUIRE(!c.read_until(p, [](const std::string&) { return false; }));
    CHECK(p.is_done());
    CHECK(p.get().body() == stub_upstream::sse_stream(4));
}

// --- 3. keep-alive pool ---------------------------------------------------------------------

TEST_CASE("sequential requests on one client connection share one upstream connection") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    client c(proxy.port());
    for (int i = 0; i < 20; ++i) {
        CAPTURE(i);
        const auto res = c.exchange(chat("json"));
        CHECK(res.result_int() == 200);
        CHECK(res.body() == stub_upstream::json_body());
    }
    const auto seen = stub.seen();
    CHECK(seen.requests.size() == 20);
    CHECK(seen.connections_accepted == 1);
}

// llama-server closes its side after an answer it sent in chunks (though the answer allows
// keep-alive), so such a connection is not pooled: the next request opens a new one instead of
// meeting a dead one and taking that for a restart. Answers with a length keep theirs.
TEST_CASE(
    "after a chunked stream the upstream connection is not pooled; after a sized answer it is") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    client c(proxy.port());
    for (int i = 0; i < 20; ++i) {
        CAPTURE(i);
        const bool sse = i % 4 == 3;  // three sized answers, then a stream, five times
        const auto res = c.exchange(chat(sse ? "sse" : "json"));
        CHECK(res.result_int() == 200);
        CHECK(res.body() == (sse ? stub_upstream::sse_stream(3) : stub_upstream::json_body()));
    }
    const auto seen = stub.seen();
    CHECK(seen.requests.size() == 20);
    CHECK(seen.connections_accepted == 5);  // one per stream, shared by the sized answers before it
}

// --- 4. request headers ---------------------------------------------------------------------

TEST_CASE("credentials and the conversation id stay at the proxy; other headers pass") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.api_keys = {"sk-test-key"};
    proxy_under_test proxy(std::move(cfg));
    auto req = chat();
    req.set("X-Conversation-Id", "conv-42");
    req.set(http::field::authorization, "Bearer sk-test-key");
    req.set("X-Api-Key", "sk-test-key");
    req.set("X-Custom", "custom-value");
    req.set(http::field::user_agent, "component-test/1");
    req.set(http::field::accept, "application/json");
    req.set("anthropic-version", "2023-06-01");
    req.set("anthropic-beta", "prompt-caching-2024-07-31");

    const auto res = roundtrip(proxy.port(), req);

    CHECK(res.result_int() == 200);
    const auto seen = stub.seen();
    REQUIRE(seen.requests.size() == 1);
    const auto& got = seen.requests[0];
    CHECK(got.value("anthropic-version") == "2023-06-01");
    CHECK(got.value("anthropic-beta") == "prompt-caching-2024-07-31");
    CHECK_FALSE(got.has("x-conversation-id"));
    CHECK_FALSE(got.has("authorization"));
    CHECK_FALSE(got.has("x-api-key"));
    CHECK(got.value("x-custom") == "custom-value");
    CHECK(got.value("user-agent") == "component-test/1");
    CHECK(got.value("accept") == "application/json");
    CHECK(got.value("content-type") == "application/json");
    CHECK(got.value("host") == "127.0.0.1:" + std::to_string(stub.port()));
}

// --- 5. errors ------------------------------------------------------------------------------

TEST_CASE("refused requests get OpenAI-shaped errors and never reach the backend") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    const auto port = proxy.port();

    check_openai_error(roundtrip(port, make_request(http::verb::get, "/no/such/path")), 404);
    check_openai_error(roundtrip(port, make_request(http::verb::post, "/slots/0?action=save",
                                                    R"({"filename":"x.bin"})")),
                       404);
    check_openai_error(roundtrip(port, make_request(http::verb::post, "/slots")), 404);
    check_openai_error(roundtrip(port, make_request(http::verb::get, "/v1/chat/completions")), 405);
    check_openai_error(roundtrip(port, chat("", R"({"messages":[)")), 400);
    check_openai_error(roundtrip(port, chat("", R"([1,2,3])")), 400);

    const auto seen = stub.seen();
    CHECK(seen.requests.empty());
    CHECK(seen.connections_accepted == 0);
}

TEST_CASE("a chunked body over the limit gets 413, headers over the limit 431") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.limits.max_body_bytes = 1024;
    cfg.limits.max_header_bytes = 4096;
    proxy_under_test proxy(std::move(cfg));

    auto small = chat("", R"({"messages":[],"pad":")" + std::string(900, 'x') + "\"}");
    CHECK(roundtrip(proxy.port(), small).result_int() == 200);

    auto big = chat("", R"({"messages":[],"pad":")" + std::string(2000, 'x') + "\"}");
    big.chunked(true);
    check_openai_error(roundtrip(proxy.port(), big), 413);

    client c(proxy.port());
    const std::string huge =
        "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + std::string(8000, 'p') +
        "\r\n\r\n";
    (void)c.send_raw(huge);  // the proxy may stop reading before all of it
    stream_parser p;
    REQUIRE(!c.read_header(p));
    REQUIRE(!c.read_until(p, [](const std::string&) { return false; }));
    check_openai_error(p.get(), 431);
    CHECK(stub.seen().requests.size() == 1);
}

// Beast reports a declared Content-Length above body_limit from async_read_header already, and
// http::server::serve_one takes that for a malformed request (400).
TEST_CASE("a Content-Length over the limit gets 413") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.limits.max_body_bytes = 1024;
    proxy_under_test proxy(std::move(cfg));

    auto big = chat("", R"({"messages":[],"pad":")" + std::string(2000, 'x') + "\"}");
    check_openai_error(roundtrip(proxy.port(), big), 413);
    CHECK(stub.seen().requests.empty());
}

TEST_CASE("API keys: missing or wrong 401, right 200, /health bare without one") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.api_keys = {"sk-one", "sk-two"};
    proxy_under_test proxy(std::move(cfg));
    const auto port = proxy.port();

    check_openai_error(roundtrip(port, chat()), 401);
    auto wrong = chat();
    wrong.set(http::field::authorization, "Bearer sk-three");
    check_openai_error(roundtrip(port, wrong), 401);
    auto not_bearer = chat();
    not_bearer.set(http::field::authorization, "sk-one");
    check_openai_error(roundtrip(port, not_bearer), 401);
    CHECK(stub.seen().requests.empty());

    auto right = chat();
    right.set(http::field::authorization, "Bearer sk-two");
    CHECK(roundtrip(port, right).result_int() == 200);
    auto api_key = chat();
    api_key.set("X-Api-Key", "sk-one");
    CHECK(roundtrip(port, api_key).result_int() == 200);
    // Without a key /health answers the bare status from the monitor's view (no monitor runs
    // here, so: unavailable) and asks no backend; with a key it checks them.
    const auto anonymous = roundtrip(port, make_request(http::verb::get, "/health"));
    CHECK(anonymous.result_int() == 503);
    CHECK(anonymous.body() == R"({"status":"unavailable"})");
    CHECK(stub.seen().requests.size() == 2);
    auto keyed = make_request(http::verb::get, "/health");
    keyed.set(http::field::authorization, "Bearer sk-one");
    const auto detailed = roundtrip(port, keyed);
    CHECK(detailed.result_int() == 200);
    CHECK(detailed.body().find("\"backends\"") != std::string::npos);
    CHECK(stub.seen().requests.size() == 3);
}

// --- 6. backend failures before the response ------------------------------------------------
// Both end in pipeline::forward's own error reply, whose message g++ 12 once destroyed twice
// (a `?:` inside the co_await'ed call): these cases are what caught it.

TEST_CASE("a backend that is down gives 502") {
    leak_check leaks;
    proxy_under_test proxy(make_config({backend_at("down", testing::unused_port())}));
    check_openai_error(roundtrip(proxy.port(), chat()), 502);
}

TEST_CASE("a backend that never answers gives 504 after upstream_response") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.timeouts.upstream_response = 300ms;
    proxy_under_test proxy(std::move(cfg));

    const auto start = std::chrono::steady_clock::now();
    const auto res = roundtrip(proxy.port(), chat("silent"));
    const auto took = std::chrono::steady_clock::now() - start;

    check_openai_error(res, 504);
    CHECK(took >= 300ms);
    CHECK(took < 3s);
    // The proxy gave up on that connection, so the backend can free its slot.
    CHECK(stub.wait_until([](const testing::stub_state& s) { return s.peer_closed == 1; }, 2s));
}

TEST_CASE("a client slow with its headers or body, or idle between requests, is let go") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.timeouts.header_read = 300ms;
    cfg.timeouts.body_read = 300ms;
    cfg.timeouts.client_idle = 300ms;
    proxy_under_test proxy(std::move(cfg));
    const auto start = std::chrono::steady_clock::now();
    client c(proxy.port());
    stream_parser p;

    SUBCASE("headers not complete within header_read: the connection is closed") {
        REQUIRE(!c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
        const auto ec = c.read_header(p);
        CHECK((ec == http::error::end_of_stream || ec == net::error::connection_reset));
    }
    SUBCASE("body not complete within body_read: 408") {
        REQUIRE(
            !c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"));
        REQUIRE(!c.read_header(p));
        REQUIRE(!c.read_until(p, [](const std::string&) { return false; }));
        check_openai_error(p.release(), 408);
    }
    SUBCASE("idle after an answer for client_idle: the connection is closed") {
        CHECK(c.exchange(chat()).result_int() == 200);
        const auto ec = c.read_header(p);
        CHECK((ec == http::error::end_of_stream || ec == net::error::connection_reset));
    }
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 300ms);
    CHECK(took < 3s);
}

// --- 7, 8. failures during a stream ---------------------------------------------------------

TEST_CASE("a backend silent mid-stream for stream_idle ends the stream with one SSE error event") {
    leak_check leaks;
    stub_upstream stub;
    auto cfg = make_config({backend_at("stub", stub.port())});
    cfg.timeouts.stream_idle = 300ms;  // the client's writes have the same deadline
    proxy_under_test proxy(std::move(cfg));
    client c(proxy.port());
    REQUIRE(!c.send(chat("hold", R"({"messages":[],"stream":true})")));
    stream_parser p;
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(!c.read_header(p));
    REQUIRE(!c.read_until(p, [](const std::string&) { return false; }));
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(p.is_done());  // the chunked body ended with its last chunk: the client was not cut
    CHECK(took >= 300ms);
    CHECK(took < 3s);

    const auto doc = error_event_after(p.get().body(), stub_upstream::sse_event(1, 3));
    CHECK(doc["error"]["code"] == 504);
    // The proxy let go of the silent backend's connection.
    CHECK(stub.wait_until([](const testing::stub_state& s) { return s.peer_closed == 1; }, 2s));
}

TEST_CASE("a backend dropping mid-stream ends the stream with one SSE error event") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    client c(proxy.port());
    auto req = chat("drop", R"({"messages":[],"stream":true})");
    req.set("X-Stub-Events", "5");
    REQUIRE(!c.send(req));
    stream_parser p;
    REQUIRE(!c.read_header(p));
    REQUIRE(!c.read_until(p, [](const std::string&) { return false; }));
    CHECK(p.is_done());  // the chunked body ended with its last chunk, not a cut

    const auto doc = error_event_after(
        p.get().body(), stub_upstream::sse_event(1, 5) + stub_upstream::sse_event(2, 5));
    CHECK(doc["error"]["code"] == 502);
    CHECK(doc["error"]["type"] == "server_error");
    CHECK(doc["error"]["message"].is_string());
}

TEST_CASE("a client leaving mid-stream closes the upstream connection") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config({backend_at("stub", stub.port())}));
    client c(proxy.port());
    REQUIRE(!c.send(chat("hold", R"({"messages":[],"stream":true})")));
    stream_parser p;
    REQUIRE(!c.read_header(p));
    const std::string first = stub_upstream::sse_event(1, 3);
    REQUIRE(!c.read_until(p, [&](const std::string& b) { return b.size() >= first.size(); }));
    CHECK(p.get().body() == first);
    CHECK(stub.seen().peer_closed == 0);

    c.close();
    CHECK(stub.wait_until([](const testing::stub_state& s) { return s.peer_closed == 1; }, 2s));
    CHECK(eventually([&] { return proxy.server.active_requests() == 0; }, 2s));
}

// --- 9, 10. several backends ----------------------------------------------------------------

TEST_CASE("a request fails over from a backend that is down to the next") {
    leak_check leaks;
    stub_upstream stub;
    proxy_under_test proxy(make_config(
        {backend_at("first-down", testing::unused_port()), backend_at("second-up", stub.port())}));
    const auto res = roundtrip(proxy.port(), chat());
    CHECK(res.result_int() == 200);
    CHECK(res["X-Warmslot-Backend"] == "second-up");
    CHECK(res.body() == stub_upstream::json_body());
}

TEST_CASE("/health reports every backend") {
    leak_check leaks;
    stub_upstream stub;
    const auto down_port = testing::unused_port();
    proxy_under_test proxy(
        make_config({backend_at("up", stub.port()), backend_at("down", down_port)}));

    const auto res = roundtrip(proxy.port(), make_request(http::verb::get, "/health"));

    CHECK(res.result_int() == 200);
    const auto doc = nlohmann::json::parse(res.body(), nullptr, false);
    CAPTURE(res.body());
    REQUIRE(doc.is_object());
    CHECK(doc["status"] == "ok");
    REQUIRE(doc["backends"].is_array());
    REQUIRE(doc["backends"].size() == 2);
    CHECK(doc["backends"][0]["name"] == "up");
    CHECK(doc["backends"][0]["status"] == "ok");
    CHECK(doc["backends"][0]["http_status"] == 200);
    CHECK(doc["backends"][1]["name"] == "down");
    CHECK(doc["backends"][1]["url"] == "http://127.0.0.1:" + std::to_string(down_port));
    CHECK(doc["backends"][1]["status"] == "unreachable");
    CHECK(stub.seen().requests.size() == 1);
    CHECK(stub.seen().requests.at(0).target == "/health");
}

TEST_CASE("/health is 503 when no backend is up") {
    leak_check leaks;
    proxy_under_test proxy(make_config({backend_at("down", testing::unused_port())}));
    const auto res = roundtrip(proxy.port(), make_request(http::verb::get, "/health"));
    CHECK(res.result_int() == 503);
    const auto doc = nlohmann::json::parse(res.body(), nullptr, false);
    REQUIRE(doc.is_object());
    CHECK(doc["status"] == "unavailable");
    CHECK(doc["backends"][0]["status"] == "unreachable");
}

}  // namespace warmslot
