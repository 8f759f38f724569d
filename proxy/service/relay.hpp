// Relaying one backend response to the client. Internal to the service module.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/timings.hpp"
#include "config/config.hpp"
#include "http/server.hpp"
#include "upstream/pool.hpp"

namespace warmslot::service {

struct outcome;

// Shared between the forwarding coroutine and the client watcher of one exchange.
struct forward_state {
    upstream::connection* current = nullptr;  // upstream connection in use, if any
    bool client_gone = false;
    // The client was sent the stream's final event: leaving after it is the end of a complete
    // answer, not a client gone in the middle.
    bool answered = false;
    bool headers_sent = false;
    // Tenant isolation: no slot came free for the request within routing.max_wait.
    bool isolation_wait_failed = false;
    // The stream's head went out early (stream_keeper): the answer goes on in its framing.
    bool early_head = false;
    bool upstream_reusable = false;  // the response was read in full and allows keep-alive
    error_code last_error;
    // Called once, as soon as the backend's answer is complete and before its last bytes go to
    // the client: a client that sends its next request the moment it has the answer must find
    // the slot already recorded as idle and holding this prompt.
    std::function<void(const std::optional<api::prompt_stats>&)> on_complete;
    // Called when the backend's answer headers were read: llama-server has started the task.
    std::function<void()> on_started;
    bool completed = false;
    void complete(const std::optional<api::prompt_stats>& s) {
        if (completed) return;
        completed = true;
        if (on_complete) on_complete(s);
    }
};

using header_list = std::vector<std::pair<std::string_view, std::string>>;  // names: literals

// Watches the client socket without consuming bytes while an exchange runs. When the client
// disconnects, it sets `client_gone` and closes the upstream connection in use, so
// llama-server cancels the task at once and the forwarding code stops at its next step. A
// client that pipelines its next request is still there: watching ends. A plain completion
// handler rather than a coroutine beside the exchange: one socket operation per watch.
// Lives on the exchange's worker; after destruction it never touches `st` again.
class client_watch {
  public:
    client_watch(timed_stream& client, forward_state& st);
    ~client_watch();
    client_watch(const client_watch&) = delete;
    client_watch& operator=(const client_watch&) = delete;

  private:
    struct shared;  // outlives the watch until the pending peek completes
    timed_stream& client_;
    std::shared_ptr<shared> shared_;
};

// Starts a client_watch for each exchange of one worker that is still running `delay` after it
// began, so that the many requests that end sooner cost no socket operation for it; a client
// that leaves is noticed within twice the delay. One per worker, used on that worker only.
class watch_list {
  public:
    static constexpr std::chrono::milliseconds delay{50};

    explicit watch_list(const net::any_io_executor& ex) : timer_(ex) {}
    // Exchanges still registered (coroutines left suspended by a stop) are let go: they may
    // be destroyed after the list, with their io_context.
    ~watch_list();
    watch_list(const watch_list&) = delete;
    watch_list& operator=(const watch_list&) = delete;

    // One exchange's place in the list, for as long as the exchange runs.
    class entry {
      public:
        entry(watch_list& list, timed_stream& client, forward_state& st);
        ~entry();
        entry(const entry&) = delete;
        entry& operator=(const entry&) = delete;

      private:
        friend class watch_list;
        watch_list* list_;  // null once the list is gone
        timed_stream& client_;
        forward_state& st_;
        std::chrono::steady_clock::time_point since_;
        std::optional<client_watch> watch_;
        entry* prev_ = nullptr;
        entry* next_ = nullptr;
    };

  private:
    void arm();  // one timer for the whole list, while it has entries
    entry* head_ = nullptr;
    net::steady_timer timer_;
    bool armed_ = false;
};

// Relays the response whose headers `p` has read. Small non-streamed bodies are read whole
// first, so what the cache did goes into response headers; streamed bodies are copied chunk by
// chunk as they arrive and what the cache did follows as HTTP trailers. `extra` headers (route,
// slot, backend) go out with the response headers.
awaitable<void> relay(http_server::exchange& ex, upstream::connection& up,
                      http::response_parser<http::buffer_body>& p, forward_state& st, outcome& out,
                      const config::config& cfg, const header_list& extra);

}  // namespace warmslot::service
