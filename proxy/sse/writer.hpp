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

}  // namespace warmslot::sse
