// Server-Sent-Events framing for the events the proxy writes itself (its own error events, for
// example). Relayed upstream events are never re-framed: they pass through byte for byte.
//
// Pure functions, no state: safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace warmslot::sse {

// Frames `payload` as one unnamed event: "data: <payload>\n\n". A payload is normally single-line
// JSON; if it holds line breaks ("\n", "\r\n" or "\r") each line gets its own "data: " line, so a
// parser reassembles the payload (with "\n" line breaks) instead of seeing a broken frame.
[[nodiscard]] std::string format_data_event(std::string_view payload);

// The same with an event name first: "event: <name>\n" then the data lines. `name` must be one
// line (it is written as is).
[[nodiscard]] std::string format_named_event(std::string_view name, std::string_view payload);

// A comment line, which every SSE client skips: ": <text>\n\n" (":\n\n" for an empty text).
// What keeps a silent stream alive; `text` must be one line.
[[nodiscard]] std::string format_comment(std::string_view text);

}  // namespace warmslot::sse
