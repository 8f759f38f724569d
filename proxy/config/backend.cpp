// The `backends` list: url backends (a running llama-server) and command backends (one warmslot
// starts and supervises).
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "config/address.hpp"
#include "config/reader.hpp"

namespace warmslot::config::detail {
namespace {

// Flags warmslot passes to a command backend itself.
constexpr std::array<std::string_view, 3> own_flags{"--host", "--port", "--slot-save-path"};

// Also a directory name under <cache.dir>/slots/, so "." and ".." are out.
bool is_backend_name(std::string_view name) {
    const auto ok = [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; };
    return !name.empty() && name.size() <= 64 && name != "." && name != ".." &&
           std::all_of(name.begin(), name.end(), ok);
}

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

// A router model's id as part of a backend name: other characters become '_'.
std::string name_part(std::string_view model) {
    std::string out;
    for (const char c : model) out.push_back(is_alnum(c) || c == '.' || c == '-' ? c : '_');
    return out;
}

std::optional<std::string_view> own_flag(std::string_view arg) {
    for (const std::string_view flag : own_flags) {
        if (arg == flag ||
            (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '='))
            return flag;
    }
    return std::nullopt;
}

}  // namespace

std::vector<backend> reader::read_backends(const entry& e) const {
    if (!e.node.IsSequence() || e.node.size() == 0) {
        fail(e.line, e.path,
             "expected a non-empty list of backends, found " +
                 std::string(e.node.IsSequence() ? "an empty list" : kind_of(e.node)));
    }
    std::vector<backend> out;
    std::vector<std::size_t> entry_of;  // the list entry each backend comes from
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const YAML::Node item = e.node[i];
        const entry item_entry{item, item_path(e.path, i), line_of(item, e.line)};
        for (auto& b : router_members(read_backend(item_entry))) {
            for (std::size_t j = 0; j < out.size(); ++j) {
                const auto other = item_path(e.path, entry_of[j]) +
                                   (out[j].router.empty() ? "" : " (" + out[j].name + ")");
                if (out[j].name == b.name) {
                    fail(item_entry.line, item_entry.path + ".name",
                         "duplicate backend name \"" + b.name + "\" (also " + other + ")");
                }
                if (lower(out[j].name) == lower(b.name)) {
                    fail(item_entry.line, item_entry.path + ".name",
                         "backend name \"" + b.name + "\" differs from " + other +
                             " only in case; names are also directory names");
                }
            }
            out.push_back(std::move(b));
            entry_of.push_back(i);
        }
    }
    return out;
}

// A router entry is one backend per model it lists; any other entry is itself.
std::vector<backend> reader::router_members(backend b) const {
    if (b.router.empty()) return {std::move(b)};
    std::vector<backend> members;
    for (const auto& model : b.models) {
        backend m = b;
        m.name = b.name + "." + name_part(model);
        m.models = {model};
        m.router_model = model;
        members.push_back(std::move(m));
    }
    return members;
}

backend reader::read_backend(const entry& e) const {
    if (!e.node.IsMap())
        fail(e.line, e.path,
             "expected a map with name and url or command, found " + std::string(kind_of(e.node)));
    backend b;
    bool have_name = false;
    bool have_url = false;
    std::vector<std::pair<std::string, int>> command_only;  // supervision keys given, and lines
    const auto supervision = [&](const entry& v) { command_only.emplace_back(v.path, v.line); };
    std::vector<std::pair<std::string, int>> url_only;  // keys read from a command's argv instead
    bool router = false;
    int router_line = e.line;
    std::vector<std::pair<std::string, int>> router_only;  // keys of a router entry only
    read_map(e, {{"name",
                  [&](const entry& v) {
                      b.name = read_scalar(v, "a name");
                      if (!is_backend_name(b.name))
                          fail(v.line, v.path,
                               "must be 1 to 64 characters of A-Z a-z 0-9 . _ - "
                               "(and not \".\" or \"..\")");
                      have_name = true;
                  }},
                 {"url",
                  [&](const entry& v) {
                      b.url = read_scalar(v, "a URL");
                      if (auto problem = parse_backend_url(b.url, b))
                          fail(v.line, v.path, *problem);
                      have_url = true;
                  }},
                 {"command", [&](const entry& v) { b.command = read_command(v); }},
                 {"models", [&](const entry& v) { b.models = read_names(v); }},
                 {"slot_save_path",
                  [&](const entry& v) {
                      b.slot_save_path = read_scalar(v, "a directory");
                      if (b.slot_save_path.empty() || b.slot_save_path.front() != '/')
                          fail(v.line, v.path, "must be an absolute directory path");
                  }},
                 {"ctx_checkpoints",
                  [&](const entry& v) {
                      b.ctx_checkpoints = static_cast<long>(read_count(v, 0, 1u << 16));
                      url_only.emplace_back(v.path, v.line);
                  }},
                 {"sleep_idle",
                  [&](const entry& v) {
                      b.sleep_idle = read_duration(v, true);
                      url_only.emplace_back(v.path, v.line);
                  }},
                 {"router",
                  [&](const entry& v) {
                      router = read_bool(v);
                      router_line = v.line;
                      url_only.emplace_back(v.path, v.line);
                  }},
                 {"min_residency",
                  [&](const entry& v) {
                      b.min_residency = read_duration(v, true);
                      router_only.emplace_back(v.path, v.line);
                  }},
                 {"start",
                  [&](const entry& v) {
                      const std::string mode = read_scalar(v, "always or on_demand");
                      if (mode == "always")
                          b.start = start_mode::always;
                      else if (mode == "on_demand")
                          b.start = start_mode::on_demand;
                      else
                          fail(v.line, v.path,
                               "unknown start \"" + mode + "\"; expected always or on_demand");
                      supervision(v);
                  }},
                 {"idle_stop",
                  [&](const entry& v) {
                      b.idle_stop = read_duration(v, true);
                      supervision(v);
                  }},
                 // A url backend's: how long requests wait for it once it stops answering.
                 {"start_timeout", [&](const entry& v) { b.start_timeout = read_duration(v); }},
                 {"restart_backoff_max",
                  [&](const entry& v) {
                      b.restart_backoff_max = read_duration(v);
                      supervision(v);
                  }},
                 {"env", [&](const entry& v) {
                      b.env = read_env(v);
                      supervision(v);
                  }}});
    if (!have_name) fail(e.line, child_path(e.path, "name"), "is required");
    check_backend_keys(e, b, have_url, command_only);
    if (b.supervised() && !url_only.empty()) {
        fail(url_only.front().second, url_only.front().first,
             "only applies to a url backend; a command backend's is read from its command "
             "(--ctx-checkpoints N, --sleep-idle-seconds N); a router is a url backend");
    }
    if (!router && !router_only.empty())
        fail(router_only.front().second, router_only.front().first,
             "only applies to a router (router: true)");
    if (router) {
        if (b.models.empty())
            fail(router_line, child_path(e.path, "models"),
                 "is required for a router: the ids of the router's models warmslot serves "
                 "(as its GET /models lists them)");
        b.router = b.name;
    }
    return b;
}

void reader::check_backend_keys(
    const entry& e, const backend& b, bool have_url,
    const std::vector<std::pair<std::string, int>>& command_only) const {
    if (have_url && b.supervised()) {
        const YAML::Node command = e.node["command"];
        fail(line_of(command, e.line), child_path(e.path, "command"),
             "give either url (a running llama-server) or command (one warmslot starts), "
             "not both");
    }
    if (!have_url && !b.supervised()) {
        fail(e.line, child_path(e.path, "url"),
             "is required, or command for a llama-server warmslot starts itself");
    }
    if (have_url && !command_only.empty()) {
        fail(command_only.front().second, command_only.front().first,
             "only applies to a backend with command (one warmslot starts), not to a url");
    }
}

std::vector<std::string> reader::read_command(const entry& e) const {
    if (!e.node.IsSequence() || e.node.size() == 0) {
        fail(e.line, e.path,
             "expected a non-empty list of arguments, program first (no shell is used), found " +
                 std::string(e.node.IsSequence() ? "an empty list" : kind_of(e.node)));
    }
    std::vector<std::string> argv;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        std::string arg = read_scalar(item, "an argument");
        if (arg.find('\0') != std::string::npos)
            fail(item.line, item.path, "must not contain a NUL character");
        if (i == 0 && arg.empty()) fail(item.line, item.path, "the program must not be empty");
        if (i == 0 && arg.find(" -") != std::string::npos)
            fail(item.line, item.path,
                 "looks like a whole command line; write the program and each argument as "
                 "separate list items (no shell is used)");
        if (const auto flag = i > 0 ? own_flag(arg) : std::nullopt) {
            fail(item.line, item.path,
                 std::string(*flag) + " is set by warmslot (it picks the address and the slot " +
                     "directory); remove it");
        }
        argv.push_back(std::move(arg));
    }
    return argv;
}

// `env:` of a command backend: NAME: value. A value written exactly as ${NAME} is read from
// warmslot's environment at load. Values may be secrets: no error message quotes one.
std::vector<std::pair<std::string, std::string>> reader::read_env(const entry& e) const {
    if (!e.node.IsMap() && !e.node.IsNull())
        fail(e.line, e.path,
             "expected a map of variable names to values, found " + std::string(kind_of(e.node)));
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = e.node.begin(); it != e.node.end(); ++it) {
        const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
        const entry item{it->second, e.path + "." + name, line_of(it->first, e.line)};
        const auto name_char = [](char c) { return is_alnum(c) || c == '_'; };
        if (name.empty() || is_digit(name.front()) || name.size() > 128 ||
            !std::all_of(name.begin(), name.end(), name_char))
            fail(item.line, item.path,
                 "a variable name is 1 to 128 characters of A-Z a-z 0-9 _, not starting with "
                 "a digit");
        for (const auto& [seen, value] : out) {
            if (lower(seen) == lower(name))
                fail(item.line, item.path, "set twice (names are compared ignoring case)");
        }
        if (!item.node.IsScalar())
            fail(item.line, item.path,
                 "expected a string, found " + std::string(kind_of(item.node)));
        std::string value = item.node.Scalar();
        if (const auto variable = env_reference(value)) {
            std::optional<std::string> from = env_ ? env_(*variable) : std::nullopt;
            if (!from)
                fail(item.line, item.path, "environment variable " + *variable + " is not set");
            value = std::move(*from);
        } else if (value.find("${") != std::string::npos) {
            fail(item.line, item.path,
                 "malformed environment reference; write the whole value as ${NAME}");
        }
        if (value.find('\0') != std::string::npos)
            fail(item.line, item.path, "must not contain a NUL character");
        out.emplace_back(name, std::move(value));
    }
    return out;
}

std::vector<std::string> reader::read_names(const entry& e) const {
    if (!e.node.IsSequence()) {
        fail(e.line, e.path,
             "expected a list of model names, found " + std::string(kind_of(e.node)));
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        out.push_back(read_scalar(item, "a model name"));
        if (out.back().empty() || out.back().size() > 256) {
            fail(item.line, item.path, "must be 1 to 256 characters");
        }
    }
    return out;
}

// Command backends: host and a default slot directory under cache.dir.
void reader::default_slot_paths(config& c, const entry& top, int backends_line) const {
    for (std::size_t i = 0; i < c.backends.size(); ++i) {
        backend& b = c.backends[i];
        if (!b.supervised()) continue;
        b.host = "127.0.0.1";
        if (!b.slot_save_path.empty()) continue;
        if (c.cache.dir.empty()) {
            const YAML::Node item = top.node["backends"][i];
            fail(line_of(item, backends_line), item_path("backends", i) + ".slot_save_path",
                 "has no default: cache.dir is not set and none of STATE_DIRECTORY, "
                 "XDG_CACHE_HOME, HOME is; set cache.dir or slot_save_path");
        }
        b.slot_save_path = c.cache.dir + "/slots/" + b.name;
    }
}

}  // namespace warmslot::config::detail

namespace warmslot::config {

std::optional<std::string> backend::env_value(const std::string& variable) const {
    if (!supervised()) return std::nullopt;
    for (const auto& [key, value] : env) {
        if (key == variable) return value;
    }
    if (const char* v = std::getenv(variable.c_str())) return std::string(v);
    return std::nullopt;
}

}  // namespace warmslot::config
