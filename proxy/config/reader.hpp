// The YAML walker behind config::parse, shared by the files of the config module: one file per
// section of the config (listed at the reader's members below), each with its keys and their
// checks. Internal: nothing outside proxy/config/ includes this header, so yaml-cpp stays inside
// the config module.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace warmslot::config::detail {

// One YAML value and where it sits; `line` is 1-based and, for an empty value, the key's line
// (yaml-cpp marks an empty value at the token that follows it).
struct entry {
    YAML::Node node;
    std::string path;
    int line = 0;
};

struct field {
    std::string_view key;
    std::function<void(const entry&)> read;
};

int line_of(const YAML::Node& node, int fallback);
// "${NAME}" -> "NAME"; std::nullopt when the text is not exactly one such reference.
std::optional<std::string> env_reference(std::string_view text);
std::string child_path(const std::string& parent, std::string_view key);
std::string item_path(const std::string& parent, std::size_t index);
std::string_view kind_of(const YAML::Node& node);

// Walks the YAML and fills a config; the first problem found throws config_error.
class reader {
  public:
    reader(std::string_view source, const env_lookup& env) : source_(source), env_(env) {}

    config read(const YAML::Node& root);

  private:
    [[noreturn]] void fail(int line, const std::string& path, std::string problem) const {
        throw config_error(source_, line, path, std::move(problem));
    }

    // reader.cpp: the primitives every section reads with.
    void read_map(const entry& map, const std::vector<field>& fields) const;
    std::string read_scalar(const entry& e, std::string_view expected) const;
    bool read_bool(const entry& e) const;
    std::size_t read_count(const entry& e, std::size_t min, std::size_t max) const;
    std::size_t read_size(const entry& e, std::uint64_t min, std::uint64_t max) const;
    millis read_duration(const entry& e, bool allow_zero = false) const;
    std::vector<std::string> read_list(const entry& e, std::string_view what) const;

    // One file per section (or a few small ones that belong together). config.cpp reads the top
    // level and calls these.

    // listen.cpp: listen, limits, timeouts.
    listen_address read_listen(const entry& e) const;
    limits read_limits(const entry& e) const;
    timeouts read_timeouts(const entry& e) const;

    // tls.cpp: tls.
    tls_settings read_tls(const entry& e) const;

    // access.cpp: api_keys (plain keys or {key, role, tenant} maps), http, and the tenants' disk
    // budgets of cache.tenant_max_disk.
    void read_api_keys(const entry& e, config& c) const;
    key_grant read_key_grant(const entry& e, std::string& key) const;
    std::string read_api_key(const entry& e) const;
    void check_api_key(const entry& e, const std::string& key, const std::string& from) const;
    http_settings read_http(const entry& e) const;
    std::vector<std::pair<std::string, std::uint64_t>> read_tenant_budgets(const entry& e) const;
    // After the whole file: each budget within max_disk, each named tenant one of a key's.
    void check_tenant_budgets(const entry& cache, const config& c) const;

    // tenants.cpp: tenants.
    tenant_settings read_tenants(const entry& e) const;

    // routing.cpp: routing.
    routing_settings read_routing(const entry& e) const;

    // cache.cpp: cache.
    cache_settings read_cache(const entry& e) const;
    std::string default_cache_dir() const;
    // After the slot directories are known: cache.shared_dir is none of them.
    void check_shared_dir(const entry& cache, const config& c) const;
    // cache.isolation: tenant with nothing that undoes it (a shared tier open across tenants, a
    // supervised llama-server's RAM prompt cache turned on).
    void check_isolation(const entry& cache, const config& c) const;

    // rewrite.cpp: rewrite.
    rewrite_settings read_rewrite(const entry& e) const;
    void read_rewrite_rules(const entry& e, rewrite_rules& out) const;
    void read_volatile_lines(const entry& e, rewrite_rules& out) const;
    void read_documents(const entry& e, rewrite_rules& out) const;
    std::vector<document_delimiter> read_delimiters(const entry& e) const;
    std::string read_regex(const entry& e, unsigned min_groups) const;

    // log.cpp: log, dashboard.
    log_settings read_log(const entry& e) const;
    dashboard_settings read_dashboard(const entry& e) const;

    // backend.cpp: backends.
    std::vector<backend> read_backends(const entry& e) const;
    backend read_backend(const entry& e) const;
    std::vector<backend> router_members(backend b) const;
    std::vector<std::string> read_command(const entry& e) const;
    std::vector<std::string> read_names(const entry& e) const;
    std::vector<std::pair<std::string, std::string>> read_env(const entry& e) const;
    void check_backend_keys(const entry& e, const backend& b, bool have_url,
                            const std::vector<std::pair<std::string, int>>& command_only) const;
    void default_slot_paths(config& c, const entry& top, int backends_line) const;

    // groups.cpp: swap_groups; after the backends are read (they may come later in the file).
    std::vector<swap_group> read_swap_groups(const entry& e, const config& c,
                                             const entry& top) const;
    swap_group read_swap_group(const entry& e) const;
    void read_allow(const entry& e, swap_group& g) const;
    void check_allow(const entry& e, swap_group& g) const;
    void check_swap_group(const entry& e, const swap_group& g, const config& c,
                          const entry& top) const;

    std::string source_;
    const env_lookup& env_;
};

}  // namespace warmslot::config::detail
