#include "config/config.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <utility>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "config/address.hpp"
#include "config/reader.hpp"
#include "util/units.hpp"

namespace warmslot::config {
namespace detail {
namespace {

constexpr millis max_timeout = std::chrono::hours{24};
constexpr std::uint64_t kib = 1024;

std::string format_error(const std::string& source, int line, const std::string& key_path,
                         const std::string& problem) {
    std::string out = source;
    if (line > 0) out += ":" + std::to_string(line);
    out += ": ";
    if (!key_path.empty()) out += key_path + ": ";
    return out + problem;
}

bool has_space_or_control(std::string_view key) {
    return std::any_of(key.begin(), key.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
    });
}

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

listen_address reader::read_listen(const entry& e) const {
    listen_address out;
    if (auto problem = parse_listen(read_scalar(e, "host:port"), out))
        fail(e.line, e.path, *problem);
    return out;
}

// Never puts the key, or any part of it, into an error message.
std::string reader::read_api_key(const entry& e) const {
    if (!e.node.IsScalar())
        fail(e.line, e.path, "expected a string, found " + std::string(kind_of(e.node)));
    const std::string& text = e.node.Scalar();
    const std::optional<std::string> variable = env_reference(text);
    if (!variable) {
        if (text.find("${") != std::string::npos)
            fail(e.line, e.path,
                 "malformed environment reference; write the whole value as ${NAME}");
        check_api_key(e, text, "key");
        return text;
    }
    std::optional<std::string> value = env_ ? env_(*variable) : std::nullopt;
    if (!value) fail(e.line, e.path, "environment variable " + *variable + " is not set");
    if (value->empty()) fail(e.line, e.path, "environment variable " + *variable + " is empty");
    check_api_key(e, *value, "key from environment variable " + *variable);
    return std::move(*value);
}

void reader::check_api_key(const entry& e, const std::string& key, const std::string& from) const {
    if (key.size() < 8) fail(e.line, e.path, from + " is too short (at least 8 characters)");
    if (has_space_or_control(key))
        fail(e.line, e.path, from + " must not contain spaces or control characters");
}

limits reader::read_limits(const entry& e) const {
    limits out;
    read_map(
        e, {{"max_header_bytes",
             [&](const entry& v) { out.max_header_bytes = read_size(v, kib, kib * kib); }},
            {"max_header_count",
             [&](const entry& v) { out.max_header_count = read_count(v, 8, 10'000); }},
            {"max_body_bytes",
             [&](const entry& v) { out.max_body_bytes = read_size(v, kib, 4 * kib * kib * kib); }},
            {"max_connections",
             [&](const entry& v) { out.max_connections = read_count(v, 1, 100'000); }},
            {"stalled_reader", [&](const entry& v) { out.stalled_reader = read_duration(v); }}});
    return out;
}

tenant_settings reader::read_tenants(const entry& e) const {
    tenant_settings out;
    read_map(e, {{"limits", [&](const entry& l) {
                      read_map(l, {{"concurrent_requests",
                                    [&](const entry& v) {
                                        out.limits.concurrent_requests = read_count(v, 0, 100'000);
                                    }},
                                   {"swaps_per_minute", [&](const entry& v) {
                                        out.limits.swaps_per_minute = read_count(v, 0, 10'000);
                                    }}});
                  }}});
    return out;
}

timeouts reader::read_timeouts(const entry& e) const {
    static constexpr std::array<std::pair<std::string_view, millis timeouts::*>, 8> names{{
        {"header_read", &timeouts::header_read},
        {"body_read", &timeouts::body_read},
        {"connect", &timeouts::connect},
        {"upstream_response", &timeouts::upstream_response},
        {"stream_idle", &timeouts::stream_idle},
        {"stream_keepalive", &timeouts::stream_keepalive},
        {"client_idle", &timeouts::client_idle},
        {"shutdown_grace", &timeouts::shutdown_grace},
    }};
    timeouts out;
    std::vector<field> fields;
    for (const auto& name : names) {
        const auto member = name.second;
        fields.push_back(
            {name.first, [&out, member, this](const entry& v) { out.*member = read_duration(v); }});
    }
    read_map(e, fields);
    return out;
}

log_settings reader::read_log(const entry& e) const {
    static constexpr std::array<std::string_view, 6> levels{"trace", "debug", "info",
                                                            "warn",  "error", "off"};
    log_settings out;
    read_map(e, {{"level",
                  [&](const entry& v) {
                      out.level = read_scalar(v, "a log level");
                      if (std::find(levels.begin(), levels.end(), out.level) == levels.end())
                          fail(v.line, v.path,
                               "unknown level \"" + out.level +
                                   "\"; expected trace, debug, info, warn, error or off");
                  }},
                 {"access", [&](const entry& v) { out.access = read_bool(v); }}});
    return out;
}

dashboard_settings reader::read_dashboard(const entry& e) const {
    dashboard_settings out;
    read_map(e, {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
                 {"previews", [&](const entry& v) { out.previews = read_bool(v); }}});
    return out;
}

routing_settings reader::read_routing(const entry& e) const {
    routing_settings out;
    read_map(e, {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
                 {"short_request_tokens",
                  [&](const entry& v) { out.short_request_tokens = read_count(v, 0, 10'000'000); }},
                 {"long_segment_tokens",
                  [&](const entry& v) { out.long_segment_tokens = read_count(v, 1, 10'000'000); }},
                 {"scratch_slot", [&](const entry& v) { out.scratch_slot = read_bool(v); }},
                 {"scratch_min_slots",
                  [&](const entry& v) { out.scratch_min_slots = read_count(v, 2, 4096); }},
                 {"max_wait", [&](const entry& v) { out.max_wait = read_duration(v); }},
                 {"reconcile_interval",
                  [&](const entry& v) { out.reconcile_interval = read_duration(v); }}});
    return out;
}

cache_settings reader::read_cache(const entry& e) const {
    cache_settings out;
    read_map(e, {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
                 {"dir",
                  [&](const entry& v) {
                      out.dir = read_scalar(v, "a directory");
                      if (out.dir.empty() || out.dir.front() != '/')
                          fail(v.line, v.path, "must be an absolute directory path");
                      while (out.dir.size() > 1 && out.dir.back() == '/') out.dir.pop_back();
                  }},
                 {"max_disk",
                  [&](const entry& v) { out.max_disk = read_size(v, 1024 * 1024, UINT64_MAX / 2); }},
                 {"min_prefix_tokens",
                  [&](const entry& v) { out.min_prefix_tokens = read_count(v, 1, 100'000'000); }},
                 {"snapshot_after_uses",
                  [&](const entry& v) { out.snapshot_after_uses = read_count(v, 1, 1'000'000); }},
                 {"save_after_answer",
                  [&](const entry& v) { out.save_after_answer = read_bool(v); }},
                 {"conversation_files",
                  [&](const entry& v) { out.conversation_files = read_bool(v); }},
                 {"slot_call_timeout",
                  [&](const entry& v) { out.slot_call_timeout = read_duration(v); }},
                 {"replica_files", [&](const entry& v) { out.replica_files = read_bool(v); }},
                 {"shared_dir",
                  [&](const entry& v) {
                      out.shared_dir = read_scalar(v, "a directory");
                      if (out.shared_dir.empty() || out.shared_dir.front() != '/')
                          fail(v.line, v.path, "must be an absolute directory path");
                      while (out.shared_dir.size() > 1 && out.shared_dir.back() == '/')
                          out.shared_dir.pop_back();
                  }},
                 {"shared_max_disk",
                  [&](const entry& v) {
                      out.shared_max_disk = read_size(v, 1024 * 1024, UINT64_MAX / 2);
                  }},
                 {"shared_timeout", [&](const entry& v) { out.shared_timeout = read_duration(v); }},
                 {"shared_across_tenants",
                  [&](const entry& v) { out.shared_across_tenants = read_bool(v); }},
                 {"isolation",
                  [&](const entry& v) {
                      const std::string mode = read_scalar(v, "shared or tenant");
                      if (mode == "shared") out.isolation = isolation_mode::shared;
                      else if (mode == "tenant") out.isolation = isolation_mode::tenant;
                      else fail(v.line, v.path, "expected shared or tenant, found \"" + mode + "\"");
                  }},
                 {"tenant_max_disk",
                  [&](const entry& v) { out.tenant_max_disk = read_tenant_budgets(v); }}});
    if (out.dir.empty()) out.dir = default_cache_dir();
    return out;
}

// $STATE_DIRECTORY (set by systemd's StateDirectory=; the first of a ':'-separated list), else
// $XDG_CACHE_HOME/warmslot/state, else $HOME/.cache/warmslot/state. Relative values are ignored,
// as the XDG base directory spec asks. "" when none applies.
std::string reader::default_cache_dir() const {
    const auto absolute = [&](const std::string& name) -> std::string {
        std::optional<std::string> value = env_ ? env_(name) : std::nullopt;
        if (!value || value->empty() || value->front() != '/') return "";
        if (name == "STATE_DIRECTORY") return value->substr(0, value->find(':'));
        return *value;
    };
    if (std::string dir = absolute("STATE_DIRECTORY"); !dir.empty()) return dir;
    if (std::string dir = absolute("XDG_CACHE_HOME"); !dir.empty()) return dir + "/warmslot/state";
    if (std::string dir = absolute("HOME"); !dir.empty()) return dir + "/.cache/warmslot/state";
    return "";
}

// ---- rewrite: section (request rewriting rules per model) ----

std::vector<std::string> reader::read_list(const entry& e, std::string_view what) const {
    if (!e.node.IsSequence() && !e.node.IsNull())
        fail(e.line, e.path, "expected a list of " + std::string(what) + ", found " +
                                 std::string(kind_of(e.node)));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        out.push_back(read_scalar(item, what));
    }
    return out;
}

// A regex is compiled here once, with the engine and options the rewrite rules use (RE2,
// UTF-8, case-sensitive), so that a bad one stops the start, not a request.
std::string reader::read_regex(const entry& e, unsigned min_groups) const {
    std::string text = read_scalar(e, "a regular expression");
    if (text.empty()) fail(e.line, e.path, "must not be empty");
    if (text.size() > 1024) fail(e.line, e.path, "must be at most 1024 characters");
    RE2::Options options;
    options.set_log_errors(false);
    const RE2 compiled(text, options);
    if (!compiled.ok()) {
        fail(e.line, e.path,
             "invalid regular expression (RE2 syntax: no backreferences, no lookahead or "
             "lookbehind): " + compiled.error());
    }
    if (compiled.NumberOfCapturingGroups() < static_cast<int>(min_groups))
        fail(e.line, e.path, "needs a capture group: (...) around the id");
    return text;
}

std::vector<document_delimiter> reader::read_delimiters(const entry& e) const {
    if (!e.node.IsSequence())
        fail(e.line, e.path, "expected a list of {begin, end}, found " + std::string(kind_of(e.node)));
    std::vector<document_delimiter> out;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        if (!item.node.IsMap()) fail(item.line, item.path, "expected a map with begin and end");
        document_delimiter d;
        read_map(item, {{"begin", [&](const entry& v) { d.begin = read_regex(v, 0); }},
                        {"end", [&](const entry& v) { d.end = read_regex(v, 0); }}});
        if (d.begin.empty()) fail(item.line, child_path(item.path, "begin"), "is required");
        if (d.end.empty()) fail(item.line, child_path(item.path, "end"), "is required");
        out.push_back(std::move(d));
    }
    return out;
}

void reader::read_volatile_lines(const entry& e, rewrite_rules& out) const {
    read_map(e, {{"presets",
                  [&](const entry& v) {
                      out.volatile_presets = read_list(v, "a preset name");
                      for (std::size_t i = 0; i < out.volatile_presets.size(); ++i) {
                          if (volatile_preset(out.volatile_presets[i])) continue;
                          std::string names;
                          for (auto n : volatile_preset_names())
                              names += (names.empty() ? "" : ", ") + std::string(n);
                          fail(line_of(v.node[i], v.line), item_path(v.path, i),
                               "unknown preset; expected one of: " + names);
                      }
                  }},
                 {"mark", [&](const entry& v) { out.volatile_mark = read_bool(v); }},
                 {"patterns", [&](const entry& v) {
                      read_list(v, "a regular expression");  // the shape; each is checked below
                      out.volatile_patterns.clear();
                      for (std::size_t i = 0; i < v.node.size(); ++i) {
                          const entry item{v.node[i], item_path(v.path, i), line_of(v.node[i], v.line)};
                          out.volatile_patterns.push_back(read_regex(item, 0));
                      }
                  }}});
}

void reader::read_documents(const entry& e, rewrite_rules& out) const {
    read_map(e, {{"min_bytes",
                  [&](const entry& v) { out.document_min_bytes = read_size(v, 64, 1ull << 30); }},
                 {"delimiters", [&](const entry& v) { out.document_delimiters = read_delimiters(v); }},
                 {"order", [&](const entry& v) { out.document_order = read_bool(v); }},
                 {"edits",
                  [&](const entry& v) {
                      const std::string mode = read_scalar(v, "reprocess or append");
                      if (mode == "reprocess") out.edits = edit_mode::reprocess;
                      else if (mode == "append") out.edits = edit_mode::append;
                      else fail(v.line, v.path, "expected reprocess or append, found \"" + mode + "\"");
                  }},
                 {"edit_similarity",
                  [&](const entry& v) {
                      const std::string text = read_scalar(v, "a number from 0.1 to 1");
                      char* end = nullptr;
                      const double value = std::strtod(text.c_str(), &end);
                      if (text.empty() || end != text.c_str() + text.size() || !(value >= 0.1) ||
                          !(value <= 1.0))
                          fail(v.line, v.path, "expected a number from 0.1 to 1");
                      out.edit_similarity = value;
                  }},
                 {"edit_id", [&](const entry& v) { out.edit_id = read_regex(v, 1); }},
                 {"max_note_bytes",
                  [&](const entry& v) { out.max_note_bytes = read_size(v, 256, 1ull << 20); }}});
}

void reader::read_rewrite_rules(const entry& e, rewrite_rules& out) const {
    read_map(e, {{"system_messages",
                  [&](const entry& v) {
                      const std::string where = read_scalar(v, "keep or front");
                      if (where == "keep") out.system_to_front = false;
                      else if (where == "front") out.system_to_front = true;
                      else fail(v.line, v.path, "expected keep or front, found \"" + where + "\"");
                  }},
                 {"volatile_lines", [&](const entry& v) { read_volatile_lines(v, out); }},
                 {"documents", [&](const entry& v) { read_documents(v, out); }}});
}

// `default` applies to every model; each `models.<name>` block starts from it and overrides
// only the keys it sets, wherever the two blocks sit in the file.
rewrite_settings reader::read_rewrite(const entry& e) const {
    rewrite_settings out;
    std::optional<entry> defaults;
    std::optional<entry> models;
    read_map(e, {{"memory",
                  [&](const entry& v) { out.memory = read_size(v, 1024 * 1024, 1ull << 40); }},
                 {"default", [&](const entry& v) { defaults = v; }},
                 {"models", [&](const entry& v) { models = v; }}});
    if (defaults) read_rewrite_rules(*defaults, out.defaults);
    if (!models || models->node.IsNull()) return out;
    if (!models->node.IsMap())
        fail(models->line, models->path,
             "expected a map of model names, found " + std::string(kind_of(models->node)));
    for (const auto& kv : models->node) {
        const int key_line = line_of(kv.first, models->line);
        if (!kv.first.IsScalar()) fail(key_line, models->path, "model names must be plain strings");
        const std::string name = kv.first.Scalar();
        const std::string path = models->path + "[\"" + name + "\"]";
        for (const auto& seen : out.models) {
            if (seen.first == name) fail(key_line, path, "duplicate model name");
        }
        rewrite_rules rules = out.defaults;
        const int value_line = kv.second.IsNull() ? key_line : line_of(kv.second, key_line);
        read_rewrite_rules(entry{kv.second, path, value_line}, rules);
        out.models.emplace_back(name, std::move(rules));
    }
    return out;
}

config reader::read(const YAML::Node& root) {
    const entry top{root, "", line_of(root, 1)};
    if (!root.IsMap())
        fail(top.line, "", "expected a map of settings, found " + std::string(kind_of(root)));
    config c;
    int backends_line = 0;
    std::optional<entry> cache;   // its tenant budgets are checked once the keys are known
    std::optional<entry> groups;  // read once the backends are known
    read_map(top, {{"listen", [&](const entry& v) { c.listen = read_listen(v); }},
                   {"tls", [&](const entry& v) { c.tls = read_tls(v); }},
                   {"backends",
                    [&](const entry& v) {
                        c.backends = read_backends(v);
                        backends_line = v.line;
                    }},
                   {"api_keys", [&](const entry& v) { read_api_keys(v, c); }},
                   {"http", [&](const entry& v) { c.http = read_http(v); }},
                   {"limits", [&](const entry& v) { c.limits = read_limits(v); }},
                   {"timeouts", [&](const entry& v) { c.timeouts = read_timeouts(v); }},
                   {"routing", [&](const entry& v) { c.routing = read_routing(v); }},
                   {"cache",
                    [&](const entry& v) {
                        c.cache = read_cache(v);
                        cache = v;
                    }},
                   {"rewrite", [&](const entry& v) { c.rewrite = read_rewrite(v); }},
                   {"log", [&](const entry& v) { c.log = read_log(v); }},
                   {"dashboard", [&](const entry& v) { c.dashboard = read_dashboard(v); }},
                   {"swap_groups", [&](const entry& v) { groups = v; }},
                   {"tenants", [&](const entry& v) { c.tenants = read_tenants(v); }}});
    if (backends_line == 0)
        fail(top.line, "backends", "is required; list at least one llama-server");
    if (groups) c.swap_groups = read_swap_groups(*groups, c, top);
    if (!cache) c.cache.dir = default_cache_dir();
    if (cache) check_tenant_budgets(*cache, c);
    default_slot_paths(c, top, backends_line);
    if (cache) check_shared_dir(*cache, c);
    if (cache) check_isolation(*cache, c);
    return c;
}

}  // namespace detail

config_error::config_error(std::string source, int line, std::string key_path, std::string problem)
    : std::runtime_error(detail::format_error(source, line, key_path, problem)),
      key_path_(std::move(key_path)),
      line_(line),
      problem_(std::move(problem)) {}

env_lookup process_env() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
    };
}

namespace {

// Where each document of a text starts. yaml-cpp 0.7 never gets past a ',' where a document's
// node should start (",", "[a]\n,", "---\n,"): it reports an empty document there again and
// again, and LoadAll collects them until memory runs out.
class document_starts final : public YAML::EventHandler {
  public:
    std::vector<YAML::Mark> marks;
    void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// Throws config_error at a document that starts where the one before it did; LoadAll ends on
// any other text.
void check_documents_advance(const std::string& text, const std::string& source) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    document_starts starts;
    while (parser.HandleNextDocument(starts)) {
        const auto n = starts.marks.size();
        if (n < 2 || starts.marks[n - 1].pos != starts.marks[n - 2].pos) continue;
        const auto& at = starts.marks[n - 1];
        const auto pos = std::min(static_cast<std::size_t>(std::max(at.pos, 0)), text.size());
        throw config_error(source, std::max(at.line, 0) + 1, "",
                           "invalid YAML: unexpected '" + text.substr(pos, 1) + "'");
    }
}

}  // namespace

config parse(std::string_view yaml_text, std::string_view source, const env_lookup& env) {
    const std::string src(source);
    std::vector<YAML::Node> documents;
    try {
        const std::string text(yaml_text);
        check_documents_advance(text, src);
        documents = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
        throw config_error(src, e.mark.is_null() ? 0 : e.mark.line + 1, "",
                           "invalid YAML: " + e.msg);
    }
    if (documents.empty() || documents.front().IsNull())
        throw config_error(src, 1, "", "config is empty; at least backends is required");
    if (documents.size() > 1) {
        throw config_error(src, detail::line_of(documents[1], 0), "",
                           "only one YAML document is allowed (found a second '---')");
    }
    return detail::reader(source, env).read(documents.front());
}

config load_file(const std::string& path, const env_lookup& env) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw config_error(path, 0, "", "is a directory, not a file");
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        const int error = errno;
        throw config_error(path, 0, "", "cannot open: " + std::generic_category().message(error));
    }
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    if (file.bad()) throw config_error(path, 0, "", "cannot read the file");
    return parse(text, path, env);
}

const rewrite_rules& rewrite_settings::for_model(std::string_view model) const {
    for (const auto& [name, rules] : models) {
        if (name == model) return rules;
    }
    return defaults;
}

namespace {

// Case-insensitive RE2 regexes, searched in each line of a system prompt.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> presets{{
    {"date", R"(^\W*(today|today's date|current date|date)\b.*\d)"},
    {"time", R"(^\W*(current time|current date and time|time now|the time is|now|time)\b.*\d{1,2}:\d{2})"},
    {"iso_timestamp", R"(\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2})"},
    {"uuid", R"(\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b)"},
    {"request_id", R"(\b(request|req|session|trace|correlation|conversation|run)[ _-]?id\b\s*[:=])"},
    // Claude Code's first system block: its cc_version carries a per-session hash, so the
    // prompt of every session differs from its first token (llama-server fixes only cch=).
    {"billing_header", R"(^x-anthropic-billing-header:)"},
}};

}  // namespace

std::optional<std::string_view> volatile_preset(std::string_view name) {
    for (const auto& [key, pattern] : presets) {
        if (key == name) return pattern;
    }
    return std::nullopt;
}

std::vector<std::string_view> volatile_preset_names() {
    std::vector<std::string_view> out;
    for (const auto& p : presets) out.push_back(p.first);
    return out;
}

}  // namespace warmslot::config
