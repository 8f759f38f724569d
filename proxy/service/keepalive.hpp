// The keep-alive of a streaming request while warmslot's own work runs before the backend
// answers: waiting for a backend to start or a slot to free, restoring a file, priming and
// saving a prefix, and llama-server's own queue (it sends no headers before a task starts).
// Internal to the service module.
//
// Once the request has been held for one interval, the client gets the stream's head (200,
// text/event-stream, chunked, with the X-Warmslot headers known by then) and then one
// keep-alive event (api::keepalive_event) per interval. Whoever answers afterwards asks stop()
// first: when the head is out, the answer is written on in that framing (the backend's events
// relayed, or one error event in the API's shape) and ended with the last chunk.
//
// Lives in the request's coroutine frame, on the exchange's worker; not thread-safe. Its
// timer and writes are plain completion handlers on the client's stream beside the request's
// coroutine (which does not touch the client stream while the keeper runs; the client watch
// only peeks at the socket).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "api/endpoints.hpp"
#include "service/relay.hpp"

namespace warmslot::service {

class stream_keeper {
  public:
    // Starts the clock: the head and the first keep-alive go out after `interval`, unless
    // stop() came first. `write_timeout` bounds each write to the client.
    stream_keeper(http_server::exchange& ex, std::chrono::milliseconds interval,
                  std::chrono::milliseconds write_timeout, api::error_dialect dialect);
    ~stream_keeper();  // stops the clock; a destroyed keeper never writes again
    stream_keeper(const stream_keeper&) = delete;
    stream_keeper& operator=(const stream_keeper&) = delete;

    // Headers the head carries if it goes out from now on (backend, route, slot as planned).
    void set_headers(const header_list& extra);
    // While set, each keep-alive is the event `source` returns (prompt progress, for a client
    // that asked for it), or the keep-alive event when it returns "", and they go out at most
    // `every` apart; an empty `source` goes back to the keep-alive event at its own interval.
    void set_progress(std::function<std::string()> source, std::chrono::milliseconds every);
    // Stops the keep-alive, after the write under way if there is one. True when the head is
    // out: the caller continues the response chunked and must end it (then calls ended()).
    awaitable<bool> stop();
    bool head_sent() const;
    // The last chunk was written (or the connection is given up): the response is whole.
    void ended();
    bool is_ended() const;
    // A keep-alive write failed: the client is gone or does not read.
    bool client_failed() const;
    // The last chunk of an answer whose head went out early: what the backend's answer would
    // have carried in its head (the disk tier's action, the primed tokens) follows as trailers
    // with the prompt counts.
    static constexpr const char* trailer_names =
        "X-Warmslot-Cached-Tokens, X-Warmslot-Processed-Tokens, X-Warmslot-Primed-Tokens, "
        "X-Warmslot-Disk";

    struct state;  // shared with the pending timer and write handlers (service/keepalive.cpp)

  private:
    std::shared_ptr<state> s_;
};

}  // namespace warmslot::service
