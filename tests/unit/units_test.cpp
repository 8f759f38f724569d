#include "util/units.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace util = warmslot::util;
using std::chrono::milliseconds;

namespace {

struct size_case {
    std::string_view text;
    std::uint64_t bytes;
};

struct duration_case {
    std::string_view text;
    milliseconds duration;
};

struct bad_case {
    std::string_view text;
    std::string_view problem;  // a fragment of the error
};

constexpr std::uint64_t KiB = 1024;

}  // namespace

TEST_CASE("units: sizes that parse") {
    const size_case cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"18446744073709551615", 18446744073709551615ULL},
        {"0B", 0},
        {"512B", 512},
        {"16KiB", 16 * KiB},
        {"64MiB", 64 * KiB * KiB},
        {"50GiB", 50 * KiB * KiB * KiB},
        {"2TiB", 2 * KiB * KiB * KiB * KiB},
        {"1KB", 1000},
        {"1kB", 1000},
        {"3MB", 3'000'000},
        {"1.5GB", 1'500'000'000},
        {"2TB", 2'000'000'000'000},
        {"1.5KiB", 1536},
        {"0.5MiB", 512 * KiB},
        {"1.25GiB", 1280 * KiB * KiB},
        {"1.0", 1},
        {"64 MiB", 64 * KiB * KiB},
        {"0.001KB", 1},
        {"16777215TiB", 16777215ULL * KiB * KiB * KiB * KiB},
    };
    for (const size_case& c : cases) {
        CAPTURE(c.text);
        const auto result = util::parse_size(c.text);
        REQUIRE(result);
        CHECK(*result.value == c.bytes);
        CHECK(result.error.empty());
    }
}

TEST_CASE("units: sizes that are rejected") {
    const bad_case cases[] = {
        {"", "empty"},
        {"-1", "negative"},
        {"-1KiB", "negative"},
        {"+1KiB", "must start with a number"},
        {"KiB", "must start with a number"},
        {" 1KiB", "must start with a number"},
        {".5KiB", "must start with a number"},
        {"1.KiB", "after the decimal point"},
        {"1.5", "whole number of bytes"},
        {"0.1KiB", "whole number of bytes"},
        {"1.0000001KB", "whole number of bytes"},
        {"1,5GB", "unknown unit"},
        {"12XB", "unknown unit \"XB\""},
        {"12kib", "unknown unit"},
        {"12 ", "unit after the space"},
        {"12  MiB", "unknown unit"},
        {"1MiBx", "unknown unit"},
        {"1e6", "unknown unit"},
        {"18446744073709551616", "too large"},
        {"99999999999999999999999", "too large"},
        {"16777216TiB", "too large"},
        {"18446744073709551615.5KB", "too large"},
        {"1.1234567890123456789KB", "too many digits"},
    };
    for (const bad_case& c : cases) {
        CAPTURE(c.text);
        const auto result = util::parse_size(c.text);
        CHECK_FALSE(result);
        CHECK_FALSE(result.value.has_value());
        CHECK(result.error.find(c.problem) != std::string::npos);
    }
}

TEST_CASE("units: durations that parse") {
    const duration_case cases[] = {
        {"0ms", milliseconds{0}},        {"250ms", milliseconds{250}},
        {"10s", milliseconds{10'000}},   {"5m", milliseconds{300'000}},
        {"1h", milliseconds{3'600'000}}, {"24h", milliseconds{86'400'000}},
        {"1.5s", milliseconds{1'500}},   {"0.25h", milliseconds{900'000}},
        {"0.001s", milliseconds{1}},     {"30 s", milliseconds{30'000}},
    };
    for (const duration_case& c : cases) {
        CAPTURE(c.text);
        const auto result = util::parse_duration(c.text);
        REQUIRE(result);
        CHECK(*result.value == c.duration);
    }
}

TEST_CASE("units: durations that are rejected") {
    const bad_case cases[] = {
        {"", "empty"},
        {"10", "missing unit"},
        {"0", "missing unit"},
        {"-5s", "negative"},
        {"s", "must start with a number"},
        {"10sec", "unknown unit \"sec\""},
        {"10min", "unknown unit"},
        {"10S", "unknown unit"},
        {"1d", "unknown unit"},
        {"10us", "unknown unit"},
        {"1h30m", "unknown unit"},
        {"0.5ms", "whole number of milliseconds"},
        {"1.0001s", "whole number of milliseconds"},
        {"99999999999999999999h", "too large"},
        {"9223372036854775808ms", "too large"},
        {"2562047788016h", "too large"},
    };
    for (const bad_case& c : cases) {
        CAPTURE(c.text);
        const auto result = util::parse_duration(c.text);
        CHECK_FALSE(result);
        CHECK(result.error.find(c.problem) != std::string::npos);
    }
}

TEST_CASE("units: largest representable values") {
    CHECK(*util::parse_size("16777215TiB").value == 16777215ULL * KiB * KiB * KiB * KiB);
    CHECK(*util::parse_duration("9223372036854775807ms").value ==
          milliseconds{9223372036854775807LL});
}

TEST_CASE("units: format_size uses the largest exact 1024-based unit") {
    const size_case cases[] = {
        {"0B", 0},
        {"1B", 1},
        {"1000B", 1000},
        {"1500B", 1500},
        {"1KiB", KiB},
        {"1536B", 1536},
        {"16KiB", 16 * KiB},
        {"1025KiB", 1025 * KiB},
        {"1MiB", KiB * KiB},
        {"64MiB", 64 * KiB * KiB},
        {"4GiB", 4 * KiB * KiB * KiB},
        {"3TiB", 3 * KiB * KiB * KiB * KiB},
        {"1024TiB", 1024 * KiB * KiB * KiB * KiB},
    };
    for (const size_case& c : cases) {
        CAPTURE(c.bytes);
        CHECK(util::format_size(c.bytes) == c.text);
        CHECK(*util::parse_size(util::format_size(c.bytes)).value == c.bytes);
    }
}

TEST_CASE("units: format_duration uses the largest exact unit") {
    const duration_case cases[] = {
        {"0ms", milliseconds{0}},          {"1ms", milliseconds{1}},
        {"1500ms", milliseconds{1'500}},   {"10s", milliseconds{10'000}},
        {"90s", milliseconds{90'000}},     {"5m", milliseconds{300'000}},
        {"61m", milliseconds{3'660'000}},  {"1h", milliseconds{3'600'000}},
        {"24h", milliseconds{86'400'000}},
    };
    for (const duration_case& c : cases) {
        CAPTURE(c.duration.count());
        CHECK(util::format_duration(c.duration) == c.text);
        CHECK(*util::parse_duration(util::format_duration(c.duration)).value == c.duration);
    }
}
