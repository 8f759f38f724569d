#include "service/keepalive.hpp"

#include <algorithm>
#include <string>

#include "api/keepalive.hpp"

namespace warmslot::service {

struct stream_keeper::state {
    state(http_server::exchange& e, std::chrono::milliseconds every,
          std::chrono::milliseconds timeout, api::error_dialect d)
        : ex(e),
          interval(every),
          base_interval(every),
          write_timeout(timeout),
          event(api::keepalive_event(d)),
          tick(e.client->get_executor()),
          idle(e.client->get_executor()) {}

    http_server::exchange& ex;
    std::chrono::milliseconds interval;
    std::chrono::milliseconds base_interval;  // the keep-alive's own, without progress
    std::chrono::milliseconds write_timeout;
    std::function<std::string()> progress;  // see set_progress
    std::string event;                      // one keep-alive event
    header_list extra;                      // X-Warmslot headers for an early head
    std::string pending;                    // what the write under way sends
    net::steady_timer tick;                 // the next keep-alive
    net::steady_timer idle;                 // cancelled when a write ends: what stop() waits on
    bool stopping = false;
    bool writing = false;
    bool head = false;
    bool ended = false;
    bool failed = false;

    // The head of a stream, as the backend's would be, with warmslot's own headers.
    std::string head_bytes() const {
        http::response_header<> h;
        h.version(11);
        h.result(http::status::ok);
        h.set(http::field::content_type, "text/event-stream");
        for (const auto& [name, value] : extra) h.set(name, value);
        h.set("X-Warmslot-Request-Id", ex.id);
        for (const auto& [name, value] : ex.response_headers) h.set(name, value);
        h.set(http::field::transfer_encoding, "chunked");
        h.set(http::field::trailer, trailer_names);
        if (!ex.keep_alive) h.set(http::field::connection, "close");
        return http_server::serialized_head(h);
    }

    // One event as a chunk of the body: the progress event when there is one, else the
    // keep-alive event.
    std::string chunk() const {
        std::string progressed = progress ? progress() : std::string();
        const std::string& e = progressed.empty() ? event : progressed;
        char size[24];
        const int n = std::snprintf(size, sizeof size, "%zx\r\n", e.size());
        return std::string(size, static_cast<std::size_t>(n)) + e + "\r\n";
    }
};

namespace {

void arm(const std::shared_ptr<stream_keeper::state>& s);

void write_one(const std::shared_ptr<stream_keeper::state>& s) {
    s->pending = s->head ? s->chunk() : s->head_bytes() + s->chunk();
    s->head = true;
    s->writing = true;
    s->ex.client->expires_after(s->write_timeout);
    net::async_write(*s->ex.client, net::buffer(s->pending), [s](error_code ec, std::size_t) {
        s->writing = false;
        s->idle.cancel();
        if (ec) {
            s->failed = true;
            return;
        }
        if (!s->stopping) arm(s);
    });
}

void arm(const std::shared_ptr<stream_keeper::state>& s) {
    s->tick.expires_after(s->interval);
    s->tick.async_wait([s](error_code ec) {
        // A write under way arms the clock again when it ends (a tick that completed just
        // before set_progress re-armed it finds the other tick's write running).
        if (ec || s->stopping || s->writing) return;
        write_one(s);
    });
}

}  // namespace

stream_keeper::stream_keeper(http_server::exchange& ex, std::chrono::milliseconds interval,
                             std::chrono::milliseconds write_timeout, api::error_dialect dialect)
    : s_(std::make_shared<state>(ex, interval, write_timeout, dialect)) {
    arm(s_);
}

stream_keeper::~stream_keeper() {
    s_->stopping = true;
    s_->tick.cancel();
}

void stream_keeper::set_headers(const header_list& extra) { s_->extra = extra; }

void stream_keeper::set_progress(std::function<std::string()> source,
                                 std::chrono::milliseconds every) {
    s_->progress = std::move(source);
    const auto interval = s_->progress ? std::min(s_->base_interval, every) : s_->base_interval;
    if (interval == s_->interval) return;
    s_->interval = interval;
    // The next event at the new interval (a write under way arms the clock when it ends).
    if (!s_->writing && !s_->stopping) arm(s_);
}

awaitable<bool> stream_keeper::stop() {
    s_->stopping = true;
    s_->tick.cancel();
    while (s_->writing) {
        s_->idle.expires_at(net::steady_timer::time_point::max());
        co_await s_->idle.async_wait(nothrow);
    }
    co_return s_->head;
}

bool stream_keeper::head_sent() const { return s_->head; }
void stream_keeper::ended() { s_->ended = true; }
bool stream_keeper::is_ended() const { return s_->ended; }
bool stream_keeper::client_failed() const { return s_->failed; }

}  // namespace warmslot::service
