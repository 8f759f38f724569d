#include "util/units.hpp"

#include <array>
#include <charconv>
#include <limits>
#include <numeric>

namespace warmslot::util {
namespace {

struct unit {
    std::string_view name;
    std::uint64_t factor;
};

constexpr std::uint64_t kib = 1024;
constexpr std::array<unit, 10> size_units{{
    {"B", 1},
    {"KB", 1000},
    {"kB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"KiB", kib},
    {"MiB", kib* kib},
    {"GiB", kib* kib* kib},
    {"TiB", kib* kib* kib* kib},
}};

constexpr std::array<unit, 4> binary_units_largest_first{{
    {"TiB", kib* kib* kib* kib},
    {"GiB", kib* kib* kib},
    {"MiB", kib* kib},
    {"KiB", kib},
}};

constexpr std::array<unit, 4> duration_units{{
    {"ms", 1},
    {"s", 1000},
    {"m", 60 * 1000},
    {"h", 60 * 60 * 1000},
}};

constexpr std::string_view size_unit_list = "B, KB, MB, GB, TB, KiB, MiB, GiB or TiB";
constexpr std::string_view duration_unit_list = "ms, s, m or h";

// "12.5 MiB" split into its parts; value = whole + fraction / fraction_scale.
struct quantity {
    std::uint64_t whole = 0;
    std::uint64_t fraction = 0;
    std::uint64_t fraction_scale = 1;
    std::string_view unit;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::size_t count_digits(std::string_view text, std::size_t from) {
    std::size_t end = from;
    while (end < text.size() && is_digit(text[end])) ++end;
    return end - from;
}

// Parses the digits in text[from, from + count) into `out`; false on overflow.
bool read_digits(std::string_view text, std::size_t from, std::size_t count, std::uint64_t& out) {
    const char* first = text.data() + from;
    auto [ptr, ec] = std::from_chars(first, first + count, out);
    return ec == std::errc{} && ptr == first + count;
}

// Reads "<digits>[.<digits>][ ]<unit>"; on failure returns the reason.
std::optional<std::string> split_quantity(std::string_view text, quantity& out) {
    if (text.empty()) return "empty value";
    if (text.front() == '-') return "must not be negative";
    const std::size_t whole_digits = count_digits(text, 0);
    if (whole_digits == 0) return "must start with a number";
    if (!read_digits(text, 0, whole_digits, out.whole)) return "number is too large";
    std::size_t pos = whole_digits;
    if (pos < text.size() && text[pos] == '.') {
        const std::size_t fraction_digits = count_digits(text, pos + 1);
        if (fraction_digits == 0) return "expected digits after the decimal point";
        if (fraction_digits > 18) return "too many digits after the decimal point";
        read_digits(text, pos + 1, fraction_digits, out.fraction);
        for (std::size_t i = 0; i < fraction_digits; ++i) out.fraction_scale *= 10;
        pos += 1 + fraction_digits;
    }
    if (pos < text.size() && text[pos] == ' ') {
        if (++pos == text.size()) return "expected a unit after the space";
    }
    out.unit = text.substr(pos);
    return std::nullopt;
}

template <std::size_t N>
const unit* find_unit(const std::array<unit, N>& units, std::string_view name) {
    for (const unit& u : units) {
        if (u.name == name) return &u;
    }
    return nullptr;
}

// whole * factor + fraction * factor / scale, exactly; `what` names the smallest step.
parse_result<std::uint64_t> scale(const quantity& q, std::uint64_t factor, std::string_view what) {
    constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    if (q.whole > max / factor) return {std::nullopt, "value is too large"};
    const std::uint64_t whole = q.whole * factor;
    // fraction * factor / scale without overflow: divide both by their gcd first.
    const std::uint64_t g = std::gcd(factor, q.fraction_scale);
    const std::uint64_t scale_left = q.fraction_scale / g;
    if (q.fraction % scale_left != 0) {
        return {std::nullopt, "not a whole number of " + std::string(what)};
    }
    const std::uint64_t part = (q.fraction / scale_left) * (factor / g);
    if (whole > max - part) return {std::nullopt, "value is too large"};
    return {whole + part, {}};
}

}  // namespace

parse_result<std::uint64_t> parse_size(std::string_view text) {
    quantity q;
    if (auto problem = split_quantity(text, q)) return {std::nullopt, *problem};
    std::uint64_t factor = 1;
    if (!q.unit.empty()) {
        const unit* u = find_unit(size_units, q.unit);
        if (u == nullptr) {
            return {std::nullopt, "unknown unit \"" + std::string(q.unit) + "\"; expected " +
                                      std::string(size_unit_list)};
        }
        factor = u->factor;
    }
    return scale(q, factor, "bytes");
}

parse_result<std::chrono::milliseconds> parse_duration(std::string_view text) {
    using millis = std::chrono::milliseconds;
    quantity q;
    if (auto problem = split_quantity(text, q)) return {std::nullopt, *problem};
    if (q.unit.empty()) {
        return {std::nullopt, "missing unit; expected " + std::string(duration_unit_list)};
    }
    const unit* u = find_unit(duration_units, q.unit);
    if (u == nullptr) {
        return {std::nullopt, "unknown unit \"" + std::string(q.unit) + "\"; expected " +
                                  std::string(duration_unit_list)};
    }
    parse_result<std::uint64_t> ms = scale(q, u->factor, "milliseconds");
    if (!ms) return {std::nullopt, ms.error};
    constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<millis::rep>::max());
    if (*ms.value > max) return {std::nullopt, "value is too large"};
    return {millis{static_cast<millis::rep>(*ms.value)}, {}};
}

std::string format_size(std::uint64_t bytes) {
    for (const unit& u : binary_units_largest_first) {
        if (bytes != 0 && bytes % u.factor == 0) {
            return std::to_string(bytes / u.factor) + std::string(u.name);
        }
    }
    return std::to_string(bytes) + "B";
}

std::string format_duration(std::chrono::milliseconds duration) {
    const auto ms = duration.count();
    for (std::size_t i = duration_units.size(); i-- > 1;) {
        const auto factor = static_cast<std::chrono::milliseconds::rep>(duration_units[i].factor);
        if (ms != 0 && ms % factor == 0) {
            return std::to_string(ms / factor) + std::string(duration_units[i].name);
        }
    }
    return std::to_string(ms) + "ms";
}

}  // namespace warmslot::util
