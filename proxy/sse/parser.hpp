// Incremental Server-Sent-Events parser (WHATWG HTML "event stream interpretation").
//
// The relay tees a copy of every upstream chunk into a parser to observe the events (for example
// the `timings` that llama-server puts on its last event). The parser never produces bytes for the
// client: the relayed stream is forwarded unchanged, so a parser failure can only cost us the
// observation, never the response.
//
// A `parser` owns the bytes of the line and the event it is assembling and nothing else. It is a
// plain value: not thread-safe, use one per stream from the strand that relays that stream.
//
// Rules followed (WHATWG, section "Parsing an event stream"):
//   - line endings "\r\n", "\n" and "\r"; a "\r" ending one chunk and a "\n" starting the next
//     are one line ending;
//   - one leading UTF-8 byte order mark at the start of the stream is ignored;
//   - lines starting with ':' are comments; a line without ':' is a field with an empty value;
//     one space right after the colon is removed;
//   - `data` lines are joined with "\n"; `event` sets the name of the next event; `id` sets the
//     last event id, which persists across events (ignored if it contains a NUL byte);
//     `retry` and unknown fields are ignored (we never reconnect);
//   - a blank line dispatches the event if at least one `data` field was seen (even an empty
//     one: "data:\n\n" is an event with empty data), else it only resets the name;
//   - at end of stream an unterminated line or event is discarded, never dispatched.
// Bytes are passed through as they are: invalid UTF-8 is not replaced with U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace warmslot::sse {

struct event {
    std::string name;  // the `event` field; empty means the default type ("message")
    std::string data;  // `data` lines joined with "\n"
    std::string id;    // last event id seen on the stream so far (persists across events)

    friend bool operator==(const event&, const event&) = default;
};

// Receives each event as it completes. The views are valid during the call only.
class event_sink {
  public:
    virtual void on_event(std::string_view name, std::string_view data, std::string_view id) = 0;

  protected:
    ~event_sink() = default;
};

class parser {
  public:
    static constexpr std::size_t default_max_event_bytes = 8 * 1024 * 1024;

    // `max_event_bytes` bounds the memory held for one event: the failure condition is
    // "data and name gathered so far + length of the current line > max_event_bytes", checked
    // as bytes arrive, so it does not depend on how the stream is split into chunks. Comment
    // lines are skipped without being buffered and do not count. (The last event id is kept
    // besides; it is bounded by the same limit as the line that set it.)
    explicit parser(std::size_t max_event_bytes = default_max_event_bytes) noexcept;

    // Consumes the next chunk of the stream and appends every event it completes to `out`.
    // Chunks may be split anywhere, even inside a "\r\n". Once `failed()`, does nothing.
    void feed(std::string_view bytes, std::vector<event>& out);
    // The same, handing each event to `sink` without building an `event`.
    void feed(std::string_view bytes, event_sink& sink);

    // End of stream. Per WHATWG an unterminated event is NOT dispatched, so nothing is ever
    // appended to `out`; check `pending()` first to learn whether the stream was cut inside an
    // event. Resets the parser (including the failed state) for a new stream.
    void finish(std::vector<event>& out);

    // True when an event exceeded `max_event_bytes`; the parser then ignores further input.
    [[nodiscard]] bool failed() const noexcept { return failed_; }

    // True when an unfinished line or an undispatched event is buffered.
    [[nodiscard]] bool pending() const noexcept;

  private:
    void append_partial(std::string_view part);
    void end_line(std::string_view tail, event_sink& out);
    void process_line(std::string_view line, event_sink& out);
    void process_field(std::string_view field, std::string_view value);
    void dispatch(event_sink& out);
    [[nodiscard]] bool fits(std::size_t extra) const noexcept;
    void fail() noexcept;

    std::size_t max_event_bytes_;
    std::string line_;             // bytes of the current line not yet terminated
    std::string data_;             // data buffer: each data value followed by "\n"
    std::string name_;             // event type buffer
    std::string last_id_;          // last event id buffer
    bool skip_lf_ = false;         // the previous byte was "\r": a following "\n" is not a new line
    bool in_comment_ = false;      // discarding the rest of a comment line
    bool at_stream_start_ = true;  // the first line may begin with a byte order mark
    bool failed_ = false;
};

}  // namespace warmslot::sse
