// Requests warmslot refuses itself before they reach a backend, counted by reason for /metrics.
// Pure: no Asio, no Beast.
//
// One set of counters per process, owned by the HTTP server and read by /metrics: the counters
// are atomics, so `add` and `count` are thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace warmslot::http_server {

// A fixed set: the label values of warmslot_requests_refused_total{reason}.
enum class refusal {
    headers_too_large,     // 431: request line and headers over limits.max_header_bytes
    too_many_headers,      // 431: more than limits.max_header_count fields
    body_too_large,        // 413: body (declared or read) over limits.max_body_bytes
    bad_request,           // 400: malformed request line, headers or body framing
    chunk_line_too_long,   // 400: a chunk-size line or trailer section over the buffer cap
    body_timeout,          // 408: body not complete within timeouts.body_read
    unauthorized,          // 401: missing or invalid API key
    too_many_connections,  // 503: over limits.max_connections (answered or closed at once)
};
inline constexpr std::size_t refusal_kinds = 8;

constexpr std::string_view name(refusal r) noexcept {
    switch (r) {
        case refusal::headers_too_large: return "headers_too_large";
        case refusal::too_many_headers: return "too_many_headers";
        case refusal::body_too_large: return "body_too_large";
        case refusal::bad_request: return "bad_request";
        case refusal::chunk_line_too_long: return "chunk_line_too_long";
        case refusal::body_timeout: return "body_timeout";
        case refusal::unauthorized: return "unauthorized";
        case refusal::too_many_connections: return "too_many_connections";
    }
    return "unknown";
}

class refusal_counts {
  public:
    void add(refusal r) noexcept { counts_[index(r)].fetch_add(1, std::memory_order_relaxed); }
    std::uint64_t count(refusal r) const noexcept {
        return counts_[index(r)].load(std::memory_order_relaxed);
    }

  private:
    static constexpr std::size_t index(refusal r) noexcept { return static_cast<std::size_t>(r); }
    std::array<std::atomic<std::uint64_t>, refusal_kinds> counts_{};
};

}  // namespace warmslot::http_server
