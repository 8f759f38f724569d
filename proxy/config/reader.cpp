// The YAML walker's primitives, shared by every section of the config: key paths and lines, maps
// checked against their known keys, and the scalars of each kind (booleans, counts, sizes,
// durations, lists of strings).
#include "config/reader.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

#include "config/address.hpp"
#include "util/units.hpp"

namespace warmslot::config::detail {
namespace {

constexpr millis max_timeout = std::chrono::hours{24};

}  // namespace

// "${NAME}" -> "NAME"; std::nullopt when the text is not exactly one such reference.
std::optional<std::string> env_reference(std::string_view text) {
    if (text.size() < 4 || !text.starts_with("${") || !text.ends_with('}')) return std::nullopt;
    const std::string_view name = text.substr(2, text.size() - 3);
    const auto ok = [](char c) { return is_alnum(c) || c == '_'; };
    if (is_digit(name.front())) return std::nullopt;
    if (!std::all_of(name.begin(), name.end(), ok)) return std::nullopt;
    return std::string(name);
}

int line_of(const YAML::Node& node, int fallback) {
    const YAML::Mark mark = node.Mark();
    return mark.is_null() ? fallback : mark.line + 1;
}

std::string child_path(const std::string& parent, std::string_view key) {
    return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string item_path(const std::string& parent, std::size_t index) {
    return parent + "[" + std::to_string(index) + "]";
}

std::string_view kind_of(const YAML::Node& node) {
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    if (node.IsNull()) return "no value";
    return "a scalar";
}

void reader::read_map(const entry& map, const std::vector<field>& fields) const {
    if (map.node.IsNull()) return;  // "section:" with nothing under it keeps the defaults
    if (!map.node.IsMap())
        fail(map.line, map.path, "expected a map, found " + std::string(kind_of(map.node)));
    std::vector<std::pair<std::string, int>> seen;
    for (const auto& kv : map.node) {
        const int key_line = line_of(kv.first, map.line);
        if (!kv.first.IsScalar()) fail(key_line, map.path, "keys must be plain strings");
        const std::string& key = kv.first.Scalar();
        const std::string path = child_path(map.path, key);
        const auto it = std::find_if(fields.begin(), fields.end(),
                                     [&](const field& f) { return f.key == key; });
        if (it == fields.end()) {
            std::string expected;
            for (const field& f : fields)
                expected += (expected.empty() ? "" : ", ") + std::string(f.key);
            fail(key_line, path, "unknown key; expected one of: " + expected);
        }
        const auto dup =
            std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == key; });
        if (dup != seen.end())
            fail(key_line, path,
                 "duplicate key (first at line " + std::to_string(dup->second) + ")");
        seen.emplace_back(key, key_line);
        const int value_line = kv.second.IsNull() ? key_line : line_of(kv.second, key_line);
        it->read(entry{kv.second, path, value_line});
    }
}

std::string reader::read_scalar(const entry& e, std::string_view expected) const {
    if (!e.node.IsScalar()) {
        fail(e.line, e.path,
             "expected " + std::string(expected) + ", found " + std::string(kind_of(e.node)));
    }
    return e.node.Scalar();
}

bool reader::read_bool(const entry& e) const {
    const std::string text = read_scalar(e, "true or false");
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
    fail(e.line, e.path, "expected true or false, found \"" + text + "\"");
}

std::size_t reader::read_count(const entry& e, std::size_t min, std::size_t max) const {
    const std::string text = read_scalar(e, "a whole number");
    std::size_t value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!is_digits(text) || ec != std::errc{} || ptr != text.data() + text.size() || value < min ||
        value > max) {
        fail(e.line, e.path,
             "expected a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    }
    return value;
}

std::size_t reader::read_size(const entry& e, std::uint64_t min, std::uint64_t max) const {
    const util::parse_result<std::uint64_t> size =
        util::parse_size(read_scalar(e, "a size such as 64MiB"));
    if (!size) fail(e.line, e.path, "invalid size: " + size.error);
    if (*size.value < min || *size.value > max) {
        fail(e.line, e.path,
             "must be from " + util::format_size(min) + " to " + util::format_size(max));
    }
    return static_cast<std::size_t>(*size.value);
}

millis reader::read_duration(const entry& e, bool allow_zero) const {
    const util::parse_result<millis> duration =
        util::parse_duration(read_scalar(e, "a duration such as 10s"));
    if (!duration) fail(e.line, e.path, "invalid duration: " + duration.error);
    if (*duration.value < millis{0} || (!allow_zero && *duration.value == millis{0}))
        fail(e.line, e.path, allow_zero ? "must not be negative" : "must be greater than 0");
    if (*duration.value > max_timeout) fail(e.line, e.path, "must be at most 24h");
    return *duration.value;
}

std::vector<std::string> reader::read_list(const entry& e, std::string_view what) const {
    if (!e.node.IsSequence() && !e.node.IsNull())
        fail(e.line, e.path,
             "expected a list of " + std::string(what) + ", found " + std::string(kind_of(e.node)));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        out.push_back(read_scalar(item, what));
    }
    return out;
}

}  // namespace warmslot::config::detail
