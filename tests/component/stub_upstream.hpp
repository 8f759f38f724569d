// A stand-in for llama-server in component tests: a small HTTP/1.1 server on 127.0.0.1 port 0
// that produces the conditions a real llama-server cannot be made to produce on demand
// (mid-stream drops, silence, streams held until the test says go).
//
// Owns one io_context and the one thread that runs it; every socket lives on that thread.
// The observation methods (`seen`, `wait_until`) and `open_gate` are thread-safe and meant for
// the test thread. Stopping is the destructor's job: it stops the thread and closes everything.
//
// Behaviour is chosen per request by the `X-Stub-Behaviour` header (default `json`):
//   json          the JSON body `json_body()` at once, keep-alive
//   sse           `X-Stub-Events` events (default 3) as a chunked text/event-stream, with
//                 `X-Stub-Delay-Ms` between them; the last carries timings, then `data: [DONE]`
//   gated_sse     as `sse`, but after event 1 waits for `open_gate()` before the rest
//   drop          sends events 1 and 2 of a stream, then closes the connection
//   hold          sends event 1 of a stream, then waits until the peer closes the connection
//   silent        reads the request, never answers, waits until the peer closes
// GET /health answers 200 {"status":"ok"} whatever the header says; a target ending in
// `stub=silent` is `silent` without the header (for warmslot's own calls, which send none).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/beast.hpp"

namespace warmslot::testing {

struct recorded_request {
    std::string method;
    std::string target;
    std::string body;
    std::multimap<std::string, std::string> headers;  // names in lower case

    bool has(const std::string& lower_name) const { return headers.count(lower_name) > 0; }
    std::string value(const std::string& lower_name) const;
};

// What the stub has seen so far.
struct stub_state {
    std::size_t connections_accepted = 0;
    std::size_t peer_closed = 0;  // held or silent connections the peer closed
    std::size_t events_sent = 0;  // SSE events written, over all streams
    std::size_t streams_cut = 0;  // streams whose write failed before their end
    std::vector<recorded_request> requests;
};

class stub_upstream {
  public:
    stub_upstream();
    ~stub_upstream();
    stub_upstream(const stub_upstream&) = delete;
    stub_upstream& operator=(const stub_upstream&) = delete;

    std::uint16_t port() const { return port_; }

    // A copy of the state, taken under the lock.
    stub_state seen() const;

    // Waits until `pred(state)` holds or `timeout` passes; returns whether it holds.
    bool wait_until(const std::function<bool(const stub_state&)>& pred,
                    std::chrono::milliseconds timeout) const;

    // Lets every `gated_sse` stream, current or future, go on past its first event.
    void open_gate();

    // The exact bytes the stub sends, so tests can compare what reached the client.
    static std::string json_body();
    static std::string sse_event(int i, int n);  // event i of n (1-based), "data: ...\n\n"
    static std::string sse_stream(int n);        // all n events, then "data: [DONE]\n\n"

  private:
    awaitable<void> accept_loop();
    awaitable<void> session(tcp::socket socket);
    awaitable<bool> respond(tcp::socket& socket, const http::request<http::string_body>& req);
    awaitable<bool> stream(tcp::socket& socket, std::string behaviour, int events,
                           std::chrono::milliseconds delay);
    awaitable<void> wait_for_peer_close(tcp::socket& socket);
    void record(const http::request<http::string_body>& req);
    template <typename F>
    void update(F f);

    net::io_context ctx_{1};
    tcp::acceptor acceptor_{ctx_};
    net::steady_timer gate_{ctx_, std::chrono::steady_clock::time_point::max()};
    bool gate_open_ = false;  // stub thread only
    std::uint16_t port_ = 0;
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    stub_state state_;
    std::thread thread_;
};

// A loopback port with nothing listening on it (bound, read, closed again).
std::uint16_t unused_port();

}  // namespace warmslot::testing
