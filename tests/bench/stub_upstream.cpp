// bench_stub: a stand-in for llama-server that answers at once, for the overhead benchmark
// (tests/bench/overhead.sh). It measures nothing itself; it only has to be cheap and predictable
// so that the cost of a proxy in front of it shows.
//
//   bench_stub [--port N] [--threads N] [--hold-interval-ms N] [--slots N]
//
// Listens on 127.0.0.1 (port 0 picks a free one) and prints
// `bench_stub listening on http://127.0.0.1:PORT (json body N bytes, sse body M bytes)` on
// stdout (the sse size counts the chunked framing). The answer is chosen by the JSON
// request body, as llama-server chooses it:
//   no "stream":true             a ~330-byte chat.completion body with Content-Length
//   "stream":true                10 chat.completion.chunk events and `data: [DONE]`, chunked
//                                text/event-stream, all in one write
//   "stream":true and            the headers and one event at once, then one event every
//   "bench_hold":true            --hold-interval-ms (default 1000) until the peer closes
// GET /health, /props, /v1/models and /slots answer as an idle llama-server with --slots (4)
// slots that keep their prompts (started with -np), so a proxy in front sees a healthy backend
// and takes its normal routing path; POST /slots/ID?action=save|restore|erase reports success
// without doing anything. Anything else is a 404. Connections are kept alive, except after a
// streamed answer: the stub then closes its side, as llama-server does.
//
// Threads: one io_context run by --threads threads (default 1). Each connection is one
// coroutine, so its socket is only touched by one handler at a time; nothing else is shared
// except the constant response texts.
#include <sys/resource.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

struct options {
    unsigned short port = 0;
    unsigned threads = 1;
    long hold_interval_ms = 1000;
    long slots = 4;
};

constexpr std::string_view json_body =
    R"({"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench",)"
    R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help )"
    R"(you today?"},"finish_reason":"stop"}],"usage":{"completion_tokens":9,"prompt_tokens":12,)"
    R"("total_tokens":21},"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":4.2}})";

std::string chunk(std::string_view payload) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", payload.size());
    return std::string(size) + std::string(payload) + "\r\n";
}

std::string delta_event(std::string_view content, std::string_view finish) {
    return R"(data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,)"
           R"("model":"bench","choices":[{"index":0,"delta":{"content":")" +
           std::string(content) + R"("},"finish_reason":)" + std::string(finish) + "}]}\n\n";
}

constexpr std::string_view sse_head =
    "HTTP/1.1 200 OK\r\nServer: bench_stub\r\nContent-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";

std::string json_response(std::string_view status, std::string_view body) {
    return "HTTP/1.1 " + std::string(status) +
           "\r\nServer: bench_stub\r\nContent-Type: "
           "application/json; charset=utf-8\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

// Every answer except the held streams is a constant text, built once.
struct responses {
    std::string json;
    std::string sse;
    std::string health;
    std::string props;
    std::string models;
    std::string slots;
    std::string not_found;

    explicit responses(long slot_count) {
        json = json_response("200 OK", json_body);
        sse = std::string(sse_head);
        const char* words[] = {"Hello", "!", " How", " can", " I", " help", " you", " today", "?"};
        for (const char* w : words) sse += chunk(delta_event(w, "null"));
        sse += chunk(
            R"(data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],)"
            R"("usage":{"completion_tokens":9,"prompt_tokens":12,"total_tokens":21},)"
            R"("timings":{"cache_n":0,"prompt_n":12,"prompt_ms":4.2,"predicted_n":9,)"
            R"("predicted_ms":31.5}})"
            "\n\n");
        sse += chunk("data: [DONE]\n\n");
        sse += "0\r\n\r\n";
        health = json_response("200 OK", R"({"status":"ok"})");
        props = json_response(
            "200 OK",
            R"({"default_generation_settings":{"n_ctx":4096},"total_slots":)" +
                std::to_string(slot_count) +
                R"(,"model_path":"/models/bench.gguf","build_info":"b0-bench_stub","model_alias":"bench"})");
        models = json_response(
            "200 OK",
            R"({"object":"list","data":[{"id":"bench","object":"model","owned_by":"llamacpp"}]})");
        std::string list = "[";
        for (long i = 0; i < slot_count; ++i) {
            if (i > 0) list += ",";
            list += R"({"id":)" + std::to_string(i) +
                    R"(,"id_task":-1,"n_ctx":4096,"is_processing":false,"n_prompt_tokens":12})";
        }
        slots = json_response("200 OK", list + "]");
        not_found = json_response(
            "404 Not Found",
            R"({"error":{"code":404,"message":"File Not Found","type":"not_found_error"}})");
    }
};

// llama-server's answer to a slot save, restore or erase, reporting 12 tokens as the slots do.
std::string slot_action(std::string_view target) {
    auto id = target.substr(std::string_view("/slots/").size());
    id = id.substr(0, id.find('?'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string_view::npos) id = "0";
    return json_response("200 OK", R"({"id_slot":)" + std::string(id) +
                                       R"(,"filename":"bench.bin","n_saved":12,"n_restored":12,)"
                                       R"("n_erased":12,"n_written":4096,"n_read":4096,)"
                                       R"("timings":{"save_ms":0.1,"restore_ms":0.1}})");
}

bool mentions(std::string_view body, std::string_view key) {
    // Accepts `"key":true` and `"key": true`; the benchmark's own client sends the first.
    for (auto pos = body.find(key); pos != std::string_view::npos; pos = body.find(key, pos + 1)) {
        auto rest = body.substr(pos + key.size());
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == ':')) rest.remove_prefix(1);
        if (rest.starts_with("true")) return true;
    }
    return false;
}

// A stream that never ends by itself: one event now, then one per interval until a write fails.
net::awaitable<void> hold_stream(tcp::socket socket, long interval_ms) {
    std::string out(sse_head);
    out += chunk(delta_event("0", "null"));
    auto [ec, n] = co_await net::async_write(socket, net::buffer(out), nothrow);
    net::steady_timer timer(socket.get_executor());
    for (unsigned long i = 1; !ec; ++i) {
        timer.expires_after(std::chrono::milliseconds(interval_ms));
        co_await timer.async_wait(nothrow);
        out = chunk(delta_event(std::to_string(i), "null"));
        std::tie(ec, n) = co_await net::async_write(socket, net::buffer(out), nothrow);
    }
}

net::awaitable<void> session(tcp::socket socket, const responses& r, long hold_interval_ms) {
    socket.set_option(tcp::no_delay(true));
    boost::beast::flat_buffer buffer;
    for (;;) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(64 * 1024 * 1024);
        auto [ec, n] = co_await http::async_read(socket, buffer, parser, nothrow);
        if (ec) break;
        const auto& req = parser.get();
        const std::string_view target = req.target();
        const std::string* answer = &r.not_found;
        std::string action;  // the one answer that depends on the request
        if (req.method() == http::verb::get) {
            if (target == "/health")
                answer = &r.health;
            else if (target == "/props")
                answer = &r.props;
            else if (target == "/v1/models" || target == "/models")
                answer = &r.models;
            else if (target == "/slots")
                answer = &r.slots;
        } else if (req.method() == http::verb::post && target.starts_with("/slots/")) {
            action = slot_action(target);
            answer = &action;
        } else if (req.method() == http::verb::post) {
            const std::string_view body = req.body();
            if (!mentions(body, "\"stream\"")) {
                answer = &r.json;
            } else if (mentions(body, "\"bench_hold\"")) {
                co_await hold_stream(std::move(socket), hold_interval_ms);
                co_return;
            } else {
                answer = &r.sse;
            }
        }
        std::tie(ec, n) = co_await net::async_write(socket, net::buffer(*answer), nothrow);
        // llama-server (cpp-httplib) closes its side after an answer it sent in chunks, though
        // the answer allows keep-alive: so does the stub, and a proxy in front pays for a new
        // upstream connection per stream here as it does there.
        if (ec || !req.keep_alive() || answer == &r.sse) break;
    }
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
}

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, const responses& r, long hold_ms) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(nothrow);
        if (ec == net::error::operation_aborted) co_return;
        if (ec) continue;  // e.g. EMFILE; the client will see a refused or reset connection
        net::co_spawn(acceptor.get_executor(), session(std::move(socket), r, hold_ms),
                      net::detached);
    }
}

long number(const char* flag, const char* text, long lo, long hi) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < lo || v > hi) {
        std::fprintf(stderr, "bench_stub: %s wants a number in %ld..%ld, got '%s'\n", flag, lo, hi,
                     text);
        std::exit(2);
    }
    return v;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr,
                         "usage: bench_stub [--port N] [--threads N] [--hold-interval-ms N] "
                         "[--slots N]\n");
            std::exit(2);
        }
        const char* v = argv[++i];
        if (a == "--port")
            o.port = static_cast<unsigned short>(number(argv[i - 1], v, 0, 65535));
        else if (a == "--threads")
            o.threads = static_cast<unsigned>(number(argv[i - 1], v, 1, 64));
        else if (a == "--hold-interval-ms")
            o.hold_interval_ms = number(argv[i - 1], v, 1, 3600000);
        else if (a == "--slots")
            o.slots = number(argv[i - 1], v, 1, 1024);
        else {
            std::fprintf(stderr, "bench_stub: unknown option %s\n", argv[i - 1]);
            std::exit(2);
        }
    }
    return o;
}

// A thousand held streams need two descriptors each on the proxy and one each here.
void raise_fd_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const options opt = parse(argc, argv);
    raise_fd_limit();
    try {
        const responses r(opt.slots);
        net::io_context ctx(static_cast<int>(opt.threads));
        tcp::acceptor acceptor(ctx);
        const tcp::endpoint ep(net::ip::make_address("127.0.0.1"), opt.port);
        acceptor.open(ep.protocol());
        acceptor.set_option(net::socket_base::reuse_address(true));
        acceptor.bind(ep);
        acceptor.listen(net::socket_base::max_listen_connections);
        net::signal_set signals(ctx, SIGINT, SIGTERM);
        signals.async_wait([&ctx](const boost::system::error_code&, int) { ctx.stop(); });
        net::co_spawn(ctx, accept_loop(acceptor, r, opt.hold_interval_ms), net::detached);

        std::printf(
            "bench_stub listening on http://127.0.0.1:%u (json body %zu bytes, sse body "
            "%zu bytes)\n",
            static_cast<unsigned>(acceptor.local_endpoint().port()), json_body.size(),
            r.sse.size() - sse_head.size());
        std::fflush(stdout);
        std::vector<std::thread> threads;
        for (unsigned i = 1; i < opt.threads; ++i) threads.emplace_back([&ctx] { ctx.run(); });
        ctx.run();
        for (auto& t : threads) t.join();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_stub: %s\n", e.what());
        return 1;
    }
    return 0;
}
