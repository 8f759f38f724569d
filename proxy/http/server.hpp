// The client side: accepts connections, reads requests under limits and deadlines, hands each
// request to a handler, and keeps connections alive between requests.
//
// One coroutine per connection, on the worker (io_context, one thread) that accepted it.
// `stop` may be called from any thread; everything else runs on the workers.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/source.hpp"
#include "http/refusals.hpp"
#include "net/beast.hpp"
#include "net/timed_stream.hpp"
#include "net/tls.hpp"

namespace warmslot::http_server {

// One request being served. The handler writes the response to `client` and may clear
// `keep_alive` when the connection cannot be reused (e.g. a response cut short).
struct exchange {
    timed_stream* client = nullptr;
    http::request<http::string_body> request;
    std::string id;          // request id for logs and the X-Warmslot-Request-Id header
    std::size_t worker = 0;  // index of the worker running this exchange
    bool keep_alive = true;
    // The request has a body that was not read because the screen refused it: the body is
    // empty, keep_alive is false, and the connection closes after the answer.
    bool body_skipped = false;
    // Headers every answer to this request carries (warmslot's CORS headers), set by the
    // handler before it answers; write_json(exchange&, ...) and the relay add them.
    std::vector<std::pair<std::string_view, std::string>> response_headers;
};
using handler = std::function<awaitable<void>(exchange&)>;

// Looks at a request's header before its body is read (and before `100 Continue` is sent):
// false means the request will be refused whatever its body holds (no valid API key), so the
// body is not read. Called on the worker serving the request.
using screen = std::function<bool(const http::request_header<>&)>;

// A fixed set of single-threaded io_contexts, and a small pool for the CPU-heavy work of
// their requests (parsing a large body), which never runs on an I/O thread.
class workers {
  public:
    explicit workers(std::size_t n);
    ~workers();
    std::size_t size() const { return contexts_.size(); }
    net::io_context& context(std::size_t i);
    // The compute pool: (n + 1) / 2 threads, running from construction. A job posted there
    // from a request's coroutine resumes it on its worker when done. Thread-safe.
    net::thread_pool::executor_type compute() { return compute_.get_executor(); }
    void start();  // one thread per io_context
    // Waits for the threads (after stop), then for the compute pool's jobs, whose completions
    // wait in the stopped io_contexts for shutdown.
    void join();
    void stop();  // stops every io_context at once; the compute pool's jobs run on
    // After join: destroys every pending handler and suspended coroutine frame now, while what
    // their destructors use (the registry a reservation goes back to, ...) is still alive.
    void shutdown();

  private:
    class own_context;  // an io_context whose shutdown can be called early
    std::vector<std::unique_ptr<own_context>> contexts_;
    std::vector<std::unique_ptr<net::executor_work_guard<net::io_context::executor_type>>> guards_;
    std::vector<std::thread> threads_;
    net::thread_pool compute_;  // destroyed before the io_contexts its jobs resume on
};

class server {
  public:
    // Limits and timeouts are read from the current config for each request. `s` may be
    // empty (every body is read).
    server(const config::source& src, workers& w, handler h, screen s = {});
    ~server();

    // Binds and listens; throws std::system_error naming the address on failure, and
    // std::runtime_error when TLS is configured and its files do not load.
    void listen();
    // With TLS on: reads the certificate and key files again for the connections accepted from
    // now on (a reload); the ones open keep theirs. Throws std::runtime_error when they do not
    // load, and the files in use stay. Thread-safe.
    void reload_tls(const config::config& cfg);
    std::uint16_t port() const { return port_; }

    // Stops accepting; in-flight requests may finish within the grace period, then the
    // workers are stopped. Thread-safe; returns at once.
    void stop(std::chrono::milliseconds grace);
    // The first half of stop, for an owner with more to do before the workers stop: stops
    // accepting, closes the kept-alive connections that wait for their next request, and
    // returns when no request is in flight or the grace period is over. A request that
    // arrives meanwhile on an open connection is answered with `Connection: close`.
    // Call it on the acceptor's worker (worker 0).
    awaitable<void> drain(std::chrono::milliseconds grace);

    std::size_t active_requests() const { return active_requests_.load(); }
    std::size_t connections() const { return connections_.load(); }
    // Requests refused here (and, for unauthorized, by the handler), by reason. Thread-safe.
    refusal_counts& refusals() { return refusals_; }

    // A connection waiting for the first byte of its next request, on its worker's list (so
    // that a drain can close it). Lives in the connection's coroutine frame.
    struct idle_link {
        timed_stream* stream = nullptr;
        idle_link* prev = nullptr;
        idle_link* next = nullptr;
    };

  private:
    // How a connection goes on after a request: another request, a close, or a close that
    // first reads and discards what the client still sends (so that an error answer is not
    // lost to a reset while the client is still sending).
    enum class ending { keep, close, linger };

    awaitable<void> accept_loop();
    awaitable<void> session(tcp::socket socket, std::size_t worker);
    awaitable<bool> handshake(timed_stream& stream);
    awaitable<void> refuse_connection(tcp::socket socket, std::size_t limit);
    awaitable<ending> serve_one(timed_stream& stream, beast::flat_buffer& buffer, bool first,
                                std::size_t worker);
    awaitable<bool> wait_for_request(timed_stream& stream, beast::flat_buffer& buffer,
                                     std::size_t worker);
    awaitable<std::optional<ending>> read_body(timed_stream& stream, beast::flat_buffer& buffer,
                                               http::request_parser<http::string_body>& parser,
                                               const std::string& id, const config::config& cfg);
    void close_idle(std::size_t worker);  // on that worker
    std::shared_ptr<const tls::server_context> tls_context() const;

    const config::source& src_;
    workers& workers_;
    handler handler_;
    screen screen_;
    tcp::acceptor acceptor_;
    std::uint16_t port_ = 0;
    std::atomic<std::size_t> active_requests_{0};
    std::atomic<std::size_t> connections_{0};
    std::atomic<std::size_t> refusing_{0};  // over-limit connections being answered 503
    std::atomic<std::uint64_t> next_id_{1};
    std::size_t next_worker_ = 0;
    std::atomic<bool> stopping_{false};
    refusal_counts refusals_;
    std::vector<idle_link*> idle_;  // per worker: the head of its list; used on that worker
    mutable std::mutex tls_mu_;
    std::shared_ptr<const tls::server_context> tls_;  // null: plain HTTP. Guarded by tls_mu_
};

// Writes a response with a string body as one gather write (the serialized header, then the
// body): the same bytes as http::async_write, without the cost of Beast's serializer (about
// 20k instructions for a small message). Chunked responses still go through Beast. The
// stream's deadline applies. Never throws.
awaitable<error_code> write_message(timed_stream& stream,
                                    const http::response<http::string_body>& message);

// Parses what `in` already holds into `p` (whose header is read) without a read operation, for
// a body that came with its header: Beast's read would complete through the scheduler even
// then. Running out of bytes is not an error; the caller reads on while !p.is_done().
template <bool IsRequest, typename Body>
std::pair<error_code, std::size_t> parse_buffered(http::parser<IsRequest, Body>& p,
                                                  beast::flat_buffer& in) {
    error_code ec;
    std::size_t total = 0;
    p.eager(true);
    while (!p.is_done() && in.size() > 0) {
        const std::size_t used = p.put(in.data(), ec);
        in.consume(used);
        total += used;
        if (ec == http::error::need_more) return {error_code{}, total};
        if (ec || used == 0) break;
    }
    return {ec, total};
}

// The bytes Beast's serializer writes for a response header: status line, fields, empty line.
std::string serialized_head(const http::response_header<>& head);
// The last chunk of a chunked body with its trailer fields, as Beast's chunk_last writes it.
std::string serialized_last_chunk(const http::fields& trailers);

// Writes a complete response with a JSON body (errors, health), with Cache-Control: no-store
// and X-Content-Type-Options: nosniff. Never throws.
// The first form answers `ex`: its keep-alive, request id and response_headers.
awaitable<error_code> write_json(exchange& ex, unsigned status, std::string body,
                                 std::chrono::milliseconds timeout);
awaitable<error_code> write_json(timed_stream& stream, unsigned status, std::string body,
                                 bool keep_alive, const std::string& request_id,
                                 std::chrono::milliseconds timeout);

}  // namespace warmslot::http_server
