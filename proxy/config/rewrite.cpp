// rewrite: the request rewriting rules, a default block and one per model, and the volatile-line
// presets they name.
#include <re2/re2.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/reader.hpp"

namespace warmslot::config {
namespace detail {

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
             "lookbehind): " +
                 compiled.error());
    }
    if (compiled.NumberOfCapturingGroups() < static_cast<int>(min_groups))
        fail(e.line, e.path, "needs a capture group: (...) around the id");
    return text;
}

std::vector<document_delimiter> reader::read_delimiters(const entry& e) const {
    if (!e.node.IsSequence())
        fail(e.line, e.path,
             "expected a list of {begin, end}, found " + std::string(kind_of(e.node)));
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
    read_map(
        e, {{"presets",
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
    read_map(e,
             {{"min_bytes",
               [&](const entry& v) { out.document_min_bytes = read_size(v, 64, 1ull << 30); }},
              {"delimiters", [&](const entry& v) { out.document_delimiters = read_delimiters(v); }},
              {"order", [&](const entry& v) { out.document_order = read_bool(v); }},
              {"edits",
               [&](const entry& v) {
                   const std::string mode = read_scalar(v, "reprocess or append");
                   if (mode == "reprocess")
                       out.edits = edit_mode::reprocess;
                   else if (mode == "append")
                       out.edits = edit_mode::append;
                   else
                       fail(v.line, v.path, "expected reprocess or append, found \"" + mode + "\"");
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
                      if (where == "keep")
                          out.system_to_front = false;
                      else if (where == "front")
                          out.system_to_front = true;
                      else
                          fail(v.line, v.path, "expected keep or front, found \"" + where + "\"");
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
    read_map(
        e, {{"memory", [&](const entry& v) { out.memory = read_size(v, 1024 * 1024, 1ull << 40); }},
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

}  // namespace detail

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
    {"time",
     R"(^\W*(current time|current date and time|time now|the time is|now|time)\b.*\d{1,2}:\d{2})"},
    {"iso_timestamp", R"(\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2})"},
    {"uuid", R"(\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b)"},
    {"request_id",
     R"(\b(request|req|session|trace|correlation|conversation|run)[ _-]?id\b\s*[:=])"},
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
