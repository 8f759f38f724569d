// Sizes and durations written with units, as they appear in warmslot's config ("64MiB", "250ms").
//
// Pure functions: no I/O, no YAML, no locale. Safe to call from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace warmslot::util {

// Either a value or a short reason why the text was rejected (never both).
template <class T>
struct parse_result {
    std::optional<T> value;
    std::string error;

    explicit operator bool() const noexcept { return value.has_value(); }
};

// A byte count: a plain integer ("4096") or a number with a unit, optionally separated by one
// space ("16KiB", "1.5GB", "64 MiB"). Units: B; KB (or kB), MB, GB, TB = powers of 1000;
// KiB, MiB, GiB, TiB = powers of 1024. A fraction must come out as a whole number of bytes
// ("1.5KiB" = 1536 is fine, "0.1KiB" is rejected). Negative, overflowing or unknown input is
// an error.
parse_result<std::uint64_t> parse_size(std::string_view text);

// A duration with a required unit: "250ms", "10s", "5m", "1h", "1.5s". A plain number is an
// error: "10" could mean seconds or milliseconds. Must be a whole number of milliseconds.
parse_result<std::chrono::milliseconds> parse_duration(std::string_view text);

// The shortest exact spelling with a 1024-based unit: 16384 -> "16KiB", 1500 -> "1500B".
std::string format_size(std::uint64_t bytes);

// The largest exact unit: 90000ms -> "90s", 3600000ms -> "1h", 250ms -> "250ms".
std::string format_duration(std::chrono::milliseconds duration);

}  // namespace warmslot::util
