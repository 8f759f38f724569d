// bench_load: the load generator of the overhead benchmark (tests/bench/overhead.sh). The same
// client code measures every target (the stub directly, warmslot, nginx), so JSON, SSE and
// latency are measured identically for all of them.
//
//   bench_load run --url URL --mode json|sse --connections N --duration S [--warmup S] [--rate R]
//                  [--same-prompt 0|1]
//     N keep-alive connections send POST requests back to back (or, with --rate, R requests per
//     second in total, spread evenly over the connections) for warmup + duration seconds. Only
//     requests sent after the warmup count. Latency runs from just before a request is written
//     until its whole response (for SSE: every event up to `data: [DONE]` and the last chunk)
//     has been read. Requests share a system prompt and differ in a numbered user message
//     (--same-prompt 1: all identical). Prints one line of key=value pairs (`routes` tallies the
//     X-Warmslot-Route headers seen, up to any `;`); error kinds go to stderr.
//
//   bench_load streams --url URL --connections N [--timeout S] [--steady-events K]
//     Opens N held SSE streams at once. Prints `ready ...` when every stream has received its
//     first event and `steady ...` when every stream has received K events (default 3); then
//     waits for a line (or EOF) on stdin, closes everything and prints `done ...`.
//
//   bench_load free-port
//     Prints a port that was free on 127.0.0.1 a moment ago (for nginx, which cannot bind 0).
//
// Single-threaded: one io_context, one thread, one coroutine per connection. All state lives on
// that thread, except the stdin reader of `streams`, which only posts to the io_context.
#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using clock_type = std::chrono::steady_clock;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

// Log-linear latency histogram in nanoseconds: exact below 256 ns, then 128 buckets per power
// of two, so a reported percentile is within 0.4% of the true value (bucket midpoints).
class histogram {
  public:
    void record(std::uint64_t ns) {
        const std::size_t i = index(ns);
        if (i >= counts_.size()) counts_.resize(i + 1, 0);
        ++counts_[i];
        ++total_;
        max_ = std::max(max_, ns);
    }
    std::uint64_t max() const { return max_; }
    std::uint64_t percentile(double p) const {
        if (total_ == 0) return 0;
        const auto rank = std::max<std::uint64_t>(
            1, static_cast<std::uint64_t>(p * static_cast<double>(total_) + 0.999999));
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < counts_.size(); ++i) {
            seen += counts_[i];
            if (seen >= rank) return std::min(midpoint(i), max_);
        }
        return max_;
    }

  private:
    static constexpr std::uint64_t linear = 256;
    static constexpr std::uint64_t per_octave = 128;
    static std::size_t index(std::uint64_t v) {
        if (v < linear) return static_cast<std::size_t>(v);
        const auto shift = static_cast<std::uint64_t>(std::bit_width(v)) - 8;  // >= 1
        return static_cast<std::size_t>(linear + (shift - 1) * per_octave +
                                        ((v >> shift) - per_octave));
    }
    static std::uint64_t midpoint(std::size_t i) {
        if (i < linear) return i;
        const std::uint64_t shift = (i - linear) / per_octave + 1;
        const std::uint64_t low = ((i - linear) % per_octave + per_octave) << shift;
        return low + (std::uint64_t{1} << shift) / 2;
    }
    std::vector<std::uint64_t> counts_;
    std::uint64_t total_ = 0;
    std::uint64_t max_ = 0;
};

struct options {
    std::string command;
    std::string host;
    unsigned short port = 0;
    std::string path = "/v1/chat/completions";
    std::string mode = "json";
    std::size_t connections = 8;
    double duration_s = 3;
    double warmup_s = 0.5;
    double rate = 0;  // requests per second in total; 0: back to back
    double timeout_s = 60;
    unsigned steady_events = 3;
    bool same_prompt = false;  // every request identical instead of numbered
};

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr,
                 "bench_load: %s\nusage: bench_load run --url URL --mode json|sse --connections N "
                 "--duration S [--warmup S] [--rate R] [--same-prompt 0|1]\n"
                 "       bench_load streams --url URL --connections N [--timeout S] "
                 "[--steady-events K]\n"
                 "       bench_load free-port\n",
                 problem.c_str());
    std::exit(2);
}

double number(const std::string& flag, const std::string& text, double lo, double hi) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || v < lo || v > hi) {
        usage(flag + " wants a number, got '" + text + "'");
    }
    return v;
}

// Accepts http://A.B.C.D:PORT[/path] only: everything here runs on loopback.
void parse_url(const std::string& url, options& o) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) usage("--url must start with http://");
    const auto colon = url.find(':', scheme.size());
    const auto slash = url.find('/', scheme.size());
    if (colon == std::string::npos || (slash != std::string::npos && slash < colon)) {
        usage("--url needs an explicit port: " + url);
    }
    o.host = url.substr(scheme.size(), colon - scheme.size());
    const auto port = url.substr(colon + 1, slash == std::string::npos ? slash : slash - colon - 1);
    o.port = static_cast<unsigned short>(number("--url port", port, 1, 65535));
    if (slash != std::string::npos) o.path = url.substr(slash);
}

options parse(int argc, char** argv) {
    if (argc < 2) usage("missing command");
    options o;
    o.command = argv[1];
    for (int i = 2; i < argc; i += 2) {
        const std::string a = argv[i];
        if (i + 1 >= argc) usage(a + " wants a value");
        const std::string v = argv[i + 1];
        if (a == "--url")
            parse_url(v, o);
        else if (a == "--mode")
            o.mode = v;
        else if (a == "--connections")
            o.connections = static_cast<std::size_t>(number(a, v, 1, 100000));
        else if (a == "--duration")
            o.duration_s = number(a, v, 0.1, 3600);
        else if (a == "--warmup")
            o.warmup_s = number(a, v, 0, 3600);
        else if (a == "--rate")
            o.rate = number(a, v, 0, 1e7);
        else if (a == "--timeout")
            o.timeout_s = number(a, v, 1, 3600);
        else if (a == "--steady-events")
            o.steady_events = static_cast<unsigned>(number(a, v, 1, 1000));
        else if (a == "--same-prompt")
            o.same_prompt = number(a, v, 0, 1) != 0;
        else
            usage("unknown option " + a);
    }
    if (o.command != "run" && o.command != "streams" && o.command != "free-port") {
        usage("unknown command " + o.command);
    }
    if (o.mode != "json" && o.mode != "sse") usage("--mode is json or sse");
    if (o.command != "free-port" && o.host.empty()) usage("--url is required");
    return o;
}

// Every request's user message ends in a number of this many digits, so that no two requests
// are the same conversation (as from many users sharing one system prompt).
constexpr std::size_t serial_digits = 10;
constexpr std::string_view serial_marker = "Say hello to user #";

// A small chat completion request, as an OpenAI client would send it.
std::string request_text(const options& o, bool stream, bool hold) {
    std::string body = R"({"model":"bench","messages":[{"role":"system","content":"You are a )"
                       R"(helpful assistant."},{"role":"user","content":")" +
                       std::string(serial_marker) + std::string(serial_digits, '0') +
                       R"(."}],"max_tokens":16,"stream":)";
    body += stream ? "true" : "false";
    if (hold) body += R"(,"bench_hold":true)";
    body += "}";
    return "POST " + o.path + " HTTP/1.1\r\nHost: " + o.host + ":" + std::to_string(o.port) +
           "\r\nContent-Type: application/json\r\nAccept: " +
           (stream ? "text/event-stream" : "application/json") +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Writes `serial` into the request's fixed-width number (same length, same Content-Length).
void set_serial(std::string& request, std::uint64_t serial) {
    const auto at = request.find(serial_marker) + serial_marker.size();
    for (std::size_t i = serial_digits; i-- > 0; serial /= 10) {
        request[at + i] = static_cast<char>('0' + serial % 10);
    }
}

std::size_t count_events(std::string_view text) {
    std::size_t n = 0;
    for (auto p = text.find("\n\n"); p != std::string_view::npos; p = text.find("\n\n", p + 2)) ++n;
    return n;
}

// Why a response is not what the stub sends; empty when it is.
std::string check_response(const http::response<http::string_body>& res, bool sse) {
    if (res.result_int() != 200) return "status " + std::to_string(res.result_int());
    const std::string_view body = res.body();
    if (!sse) {
        return body.starts_with("{") && body.find("chat.completion") != std::string_view::npos
                   ? ""
                   : "unexpected JSON body";
    }
    if (!std::string_view(res[http::field::content_type]).starts_with("text/event-stream")) {
        return "SSE response without text/event-stream";
    }
    return body.ends_with("data: [DONE]\n\n") ? "" : "SSE stream does not end with [DONE]";
}

void close(tcp::socket& s) {
    boost::system::error_code ignored;
    s.close(ignored);
}

// ---- run: throughput and latency ------------------------------------------------------------

struct run_state {
    explicit run_state(net::io_context& ctx) : watchdog(ctx) {}
    options opt;
    std::string request;
    clock_type::time_point start, measure_start, end;
    histogram latency;
    std::uint64_t requests = 0;      // answered after the warm-up
    std::uint64_t all_requests = 0;  // answered, warm-up included (for CPU per request)
    std::uint64_t events = 0;
    std::uint64_t errors = 0;
    std::uint64_t next_serial = 1;
    std::map<std::string, std::uint64_t> error_kinds;
    std::map<std::string, std::uint64_t> routes;  // X-Warmslot-Route values (warmslot only)
    std::vector<tcp::socket*> sockets;            // the watchdog closes those still waiting
    std::size_t active = 0;
    net::steady_timer watchdog;

    void error(const std::string& kind) {
        ++errors;
        ++error_kinds[kind];
    }
};

clock_type::duration seconds(double s) {
    return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
}

net::awaitable<void> client(run_state& st, std::size_t index) {
    auto ex = co_await net::this_coro::executor;
    tcp::socket socket(ex);
    st.sockets[index] = &socket;
    beast::flat_buffer buffer;
    net::steady_timer timer(ex);
    std::string request = st.request;
    const bool sse = st.opt.mode == "sse";
    const auto interval = st.opt.rate > 0
                              ? seconds(static_cast<double>(st.opt.connections) / st.opt.rate)
                              : clock_type::duration::zero();
    auto next =
        st.start + interval * static_cast<long>(index) / static_cast<long>(st.opt.connections);
    const tcp::endpoint ep(net::ip::make_address(st.opt.host), st.opt.port);

    bool reused = false;  // the socket has carried a response: the server may have closed it
    while (clock_type::now() < st.end) {
        if (!socket.is_open()) {
            reused = false;
            auto [ec] = co_await socket.async_connect(ep, nothrow);
            if (ec) {
                st.error("connect: " + ec.message());
                close(socket);
                timer.expires_after(std::chrono::milliseconds(10));
                co_await timer.async_wait(nothrow);
                continue;
            }
            socket.set_option(tcp::no_delay(true));
        }
        if (interval > clock_type::duration::zero()) {
            timer.expires_at(next);
            co_await timer.async_wait(nothrow);
            next = std::max(next + interval, clock_type::now());
            if (clock_type::now() >= st.end) break;
        }
        if (!st.opt.same_prompt) set_serial(request, st.next_serial++);
        const auto t0 = clock_type::now();
        auto [ec, n] = co_await net::async_write(socket, net::buffer(request), nothrow);
        http::response_parser<http::string_body> parser;
        parser.body_limit(16 * 1024 * 1024);
        if (!ec) std::tie(ec, n) = co_await http::async_read(socket, buffer, parser, nothrow);
        const auto t1 = clock_type::now();
        // A kept-alive connection the server closed after its last answer (llama-server does
        // after a streamed one, and so does the stub): a client connects again and resends, as
        // HTTP clients do; not an error of the target.
        const bool closed_idle =
            ec && reused && !parser.got_some() &&
            (ec == http::error::end_of_stream || ec == net::error::eof ||
             ec == net::error::connection_reset || ec == net::error::broken_pipe);
        if (closed_idle) {
            close(socket);
            buffer.clear();
            continue;
        }
        const std::string problem = ec ? ec.message() : check_response(parser.get(), sse);
        if (!problem.empty()) {
            st.error(problem);
        } else {
            ++st.all_requests;
            if (t0 >= st.measure_start) {
                ++st.requests;
                if (auto r = parser.get().find("X-Warmslot-Route"); r != parser.get().end()) {
                    const std::string_view route = r->value();
                    ++st.routes[std::string(route.substr(0, route.find(';')))];
                }
                if (sse) st.events += count_events(parser.get().body());
                st.latency.record(static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
            }
        }
        if (!problem.empty() || !parser.get().keep_alive()) {
            close(socket);
            buffer.clear();
        } else {
            reused = true;
        }
    }
    st.sockets[index] = nullptr;
    if (--st.active == 0) st.watchdog.cancel();
}

// A target that stops answering must not hang the benchmark: ten seconds after the end,
// whatever is still waiting is closed and counted as an error.
net::awaitable<void> watchdog(run_state& st) {
    st.watchdog.expires_at(st.end + std::chrono::seconds(10));
    auto [ec] = co_await st.watchdog.async_wait(nothrow);
    if (ec) co_return;
    for (auto* s : st.sockets) {
        if (!s) continue;
        st.error("no response within 10 s after the end");
        close(*s);
    }
}

int run(const options& opt) {
    net::io_context ctx(1);
    run_state st(ctx);
    st.opt = opt;
    st.request = request_text(opt, opt.mode == "sse", false);
    st.sockets.assign(opt.connections, nullptr);
    st.active = opt.connections;
    st.start = clock_type::now();
    st.measure_start = st.start + seconds(opt.warmup_s);
    st.end = st.measure_start + seconds(opt.duration_s);
    for (std::size_t i = 0; i < opt.connections; ++i)
        net::co_spawn(ctx, client(st, i), net::detached);
    net::co_spawn(ctx, watchdog(st), net::detached);
    ctx.run();

    const auto us = [&](double p) {
        return static_cast<double>(st.latency.percentile(p)) / 1000.0;
    };
    std::string routes;
    for (const auto& [route, count] : st.routes) {
        routes += (routes.empty() ? "" : ",") + route + ":" + std::to_string(count);
    }
    std::printf(
        "mode=%s connections=%zu rate=%.0f duration_s=%.2f requests=%llu "
        "all_requests=%llu errors=%llu rps=%.0f p50_us=%.1f p90_us=%.1f p99_us=%.1f "
        "p999_us=%.1f max_us=%.1f events_per_response=%.2f routes=%s\n",
        opt.mode.c_str(), opt.connections, opt.rate, opt.duration_s,
        static_cast<unsigned long long>(st.requests),
        static_cast<unsigned long long>(st.all_requests),
        static_cast<unsigned long long>(st.errors),
        static_cast<double>(st.requests) / opt.duration_s, us(0.50), us(0.90), us(0.99), us(0.999),
        static_cast<double>(st.latency.max()) / 1000.0,
        st.requests ? static_cast<double>(st.events) / static_cast<double>(st.requests) : 0.0,
        routes.empty() ? "-" : routes.c_str());
    for (const auto& [kind, count] : st.error_kinds) {
        std::fprintf(stderr, "bench_load: %llu x %s\n", static_cast<unsigned long long>(count),
                     kind.c_str());
    }
    return 0;
}

// ---- streams: many held SSE streams ---------------------------------------------------------

struct streams_state {
    explicit streams_state(net::io_context& ctx) : deadline(ctx) {}
    options opt;
    std::string request;
    clock_type::time_point start;
    std::vector<tcp::socket*> sockets;
    std::vector<unsigned> events;  // per stream
    std::vector<bool> settled;     // per stream: got its first event, or ended
    std::size_t settled_count = 0;
    std::size_t ended = 0;       // streams that ended before being asked to stop
    std::size_t with_first = 0;  // streams that received at least one event
    std::size_t steady = 0;      // streams that received at least opt.steady_events events
    std::uint64_t total_events = 0;
    std::uint64_t errors = 0;
    std::map<std::string, std::uint64_t> error_kinds;
    bool stopping = false;
    net::steady_timer deadline;

    double elapsed_ms() const {
        return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
    }
    void stop() {
        stopping = true;
        deadline.cancel();
        for (auto* s : sockets) {
            if (s) close(*s);
        }
    }
    void error(const std::string& kind) {
        if (stopping) return;
        ++errors;
        ++error_kinds[kind];
    }
};

void report_failure(streams_state& st) {
    std::printf("failed streams=%zu with_first=%zu steady=%zu errors=%llu ms=%.0f\n",
                st.opt.connections, st.with_first, st.steady,
                static_cast<unsigned long long>(st.errors), st.elapsed_ms());
    std::fflush(stdout);
    st.stop();
}

// Once every stream got its first event or ended, a stream that ended means failure: no need
// to wait for the timeout.
void settle(streams_state& st, std::size_t index) {
    if (st.settled[index]) return;
    st.settled[index] = true;
    if (++st.settled_count == st.opt.connections && st.ended > 0 && !st.stopping) {
        report_failure(st);
    }
}

void on_events(streams_state& st, std::size_t index, std::size_t n) {
    const unsigned before = st.events[index];
    st.events[index] += static_cast<unsigned>(n);
    st.total_events += n;
    if (before == 0 && st.events[index] > 0 && ++st.with_first == st.opt.connections) {
        std::printf("ready streams=%zu ms=%.0f\n", st.with_first, st.elapsed_ms());
        std::fflush(stdout);
    }
    settle(st, index);
    if (before < st.opt.steady_events && st.events[index] >= st.opt.steady_events &&
        ++st.steady == st.opt.connections) {
        std::printf("steady streams=%zu events_each=%u ms=%.0f\n", st.steady, st.opt.steady_events,
                    st.elapsed_ms());
        std::fflush(stdout);
        st.deadline.cancel();
    }
}

net::awaitable<void> stream(streams_state& st, std::size_t index) {
    tcp::socket socket(co_await net::this_coro::executor);
    st.sockets[index] = &socket;
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    auto [ec] = co_await socket.async_connect(
        tcp::endpoint(net::ip::make_address(st.opt.host), st.opt.port), nothrow);
    std::size_t n = 0;
    if (!ec) std::tie(ec, n) = co_await net::async_write(socket, net::buffer(st.request), nothrow);
    if (!ec) std::tie(ec, n) = co_await http::async_read_header(socket, buffer, parser, nothrow);
    if (!ec && parser.get().result_int() != 200) {
        st.error("status " + std::to_string(parser.get().result_int()));
    }
    while (!ec && !st.stopping && !parser.is_done() && parser.get().result_int() == 200) {
        std::tie(ec, n) = co_await http::async_read_some(socket, buffer, parser, nothrow);
        auto& body = parser.get().body();
        const auto last = body.rfind("\n\n");
        if (last == std::string::npos) continue;
        on_events(st, index, count_events(body));
        body.erase(0, last + 2);  // keep a partial event for the next read
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || (!ec && parser.is_done())) {
        st.error("stream ended by the server");
    } else if (ec) {
        st.error(ec.message());
    }
    st.sockets[index] = nullptr;
    if (!st.stopping) {
        ++st.ended;
        if (st.settled[index] && st.settled_count == st.opt.connections) report_failure(st);
        settle(st, index);
    }
}

int streams(const options& opt) {
    net::io_context ctx(1);
    streams_state st(ctx);
    st.opt = opt;
    st.request = request_text(opt, true, true);
    st.sockets.assign(opt.connections, nullptr);
    st.events.assign(opt.connections, 0);
    st.settled.assign(opt.connections, false);
    st.start = clock_type::now();
    for (std::size_t i = 0; i < opt.connections; ++i)
        net::co_spawn(ctx, stream(st, i), net::detached);

    st.deadline.expires_after(seconds(opt.timeout_s));
    st.deadline.async_wait([&](boost::system::error_code ec) {
        if (!ec) report_failure(st);  // else: reached steady (or stopped) in time
    });
    // Stop on a line or EOF on stdin: the caller measures while the streams are open.
    std::thread([&ctx, &st] {
        std::string line;
        std::getline(std::cin, line);
        net::post(ctx, [&st] { st.stop(); });
    }).detach();
    ctx.run();

    const bool ok = st.steady == opt.connections && st.errors == 0;
    std::printf("done streams=%zu steady=%zu events=%llu errors=%llu\n", opt.connections, st.steady,
                static_cast<unsigned long long>(st.total_events),
                static_cast<unsigned long long>(st.errors));
    for (const auto& [kind, count] : st.error_kinds) {
        std::fprintf(stderr, "bench_load: %llu x %s\n", static_cast<unsigned long long>(count),
                     kind.c_str());
    }
    std::fflush(stdout);
    std::_Exit(ok ? 0 : 1);  // the stdin reader may still be blocked in getline
}

int free_port() {
    net::io_context ctx;
    tcp::acceptor acceptor(ctx, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    std::printf("%u\n", static_cast<unsigned>(acceptor.local_endpoint().port()));
    return 0;
}

// A thousand streams need a thousand descriptors here and twice that in the proxy.
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
        if (opt.command == "free-port") return free_port();
        if (opt.command == "streams") return streams(opt);
        return run(opt);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_load: %s\n", e.what());
        return 1;
    }
}
