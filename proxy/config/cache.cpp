// cache: the disk tier, its state directory and the shared tier; the checks of its keys that
// need the rest of the file (the slot directories, the backends' commands). The tenants' budgets
// (tenant_max_disk) are read in access.cpp, beside the keys that name the tenants.
#include <optional>
#include <string>
#include <string_view>

#include "config/reader.hpp"

namespace warmslot::config::detail {

cache_settings reader::read_cache(const entry& e) const {
    cache_settings out;
    const auto directory = [&](const entry& v, std::string& into) {
        into = read_scalar(v, "a directory");
        if (into.empty() || into.front() != '/')
            fail(v.line, v.path, "must be an absolute directory path");
        while (into.size() > 1 && into.back() == '/') into.pop_back();
    };
    read_map(
        e,
        {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
         {"dir", [&](const entry& v) { directory(v, out.dir); }},
         {"max_disk",
          [&](const entry& v) { out.max_disk = read_size(v, 1024 * 1024, UINT64_MAX / 2); }},
         {"min_prefix_tokens",
          [&](const entry& v) { out.min_prefix_tokens = read_count(v, 1, 100'000'000); }},
         {"snapshot_after_uses",
          [&](const entry& v) { out.snapshot_after_uses = read_count(v, 1, 1'000'000); }},
         {"save_after_answer", [&](const entry& v) { out.save_after_answer = read_bool(v); }},
         {"conversation_files", [&](const entry& v) { out.conversation_files = read_bool(v); }},
         {"slot_call_timeout", [&](const entry& v) { out.slot_call_timeout = read_duration(v); }},
         {"replica_files", [&](const entry& v) { out.replica_files = read_bool(v); }},
         {"shared_dir", [&](const entry& v) { directory(v, out.shared_dir); }},
         {"shared_max_disk",
          [&](const entry& v) { out.shared_max_disk = read_size(v, 1024 * 1024, UINT64_MAX / 2); }},
         {"shared_timeout", [&](const entry& v) { out.shared_timeout = read_duration(v); }},
         {"shared_across_tenants",
          [&](const entry& v) { out.shared_across_tenants = read_bool(v); }},
         {"isolation",
          [&](const entry& v) {
              const std::string mode = read_scalar(v, "shared or tenant");
              if (mode == "shared")
                  out.isolation = isolation_mode::shared;
              else if (mode == "tenant")
                  out.isolation = isolation_mode::tenant;
              else
                  fail(v.line, v.path, "expected shared or tenant, found \"" + mode + "\"");
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

// The shared tier keeps files of its own naming beside manifests; a slot directory's index
// deletes every slot file it has no row for. One directory cannot be both.
void reader::check_shared_dir(const entry& cache, const config& c) const {
    if (c.cache.shared_dir.empty()) return;
    const int line = line_of(cache.node["shared_dir"], cache.line);
    const std::string path = child_path(cache.path, "shared_dir");
    for (const auto& b : c.backends) {
        if (b.slot_save_path == c.cache.shared_dir)
            fail(line, path,
                 "is backend " + b.name + "'s slot directory; give it a directory of its own");
    }
    if (c.cache.shared_dir == c.cache.dir)
        fail(line, path, "is cache.dir; give it a directory of its own");
}

// llama-server's RAM prompt cache hands a slot whichever cached state shares most with a new
// prompt, whoever's request left it: under isolation it must be off (--cache-ram 0, which
// warmslot adds to the commands it starts unless they set it themselves).
void reader::check_isolation(const entry& cache, const config& c) const {
    if (!c.cache.isolated()) return;
    const int line = line_of(cache.node["isolation"], cache.line);
    const std::string path = child_path(cache.path, "isolation");
    if (c.cache.shared_across_tenants)
        fail(line, path,
             "tenant isolation and cache.shared_across_tenants: true contradict each other");
    for (const auto& b : c.backends) {
        const auto& argv = b.command;
        for (std::size_t i = 0; i < argv.size(); ++i) {
            std::string value;
            if (argv[i] == "--cache-ram" || argv[i] == "-cram") {
                value = i + 1 < argv.size() ? argv[i + 1] : "";
            } else if (argv[i].starts_with("--cache-ram=")) {
                value = argv[i].substr(std::string_view("--cache-ram=").size());
            } else {
                continue;
            }
            if (value != "0")
                fail(line, path,
                     "backend " + b.name + " runs llama-server with --cache-ram " + value +
                         ": its RAM prompt cache gives a slot any tenant's cached state; "
                         "tenant isolation needs --cache-ram 0 (or leave the flag out: warmslot "
                         "adds it)");
        }
    }
}

}  // namespace warmslot::config::detail
