// Who may call warmslot: the keys with their roles and tenants, the tenants' disk budgets, and
// what HTTP clients (browsers above all) may send: the Host names and the CORS origins.
#include <algorithm>
#include <string>

#include "config/reader.hpp"
#include "util/units.hpp"

namespace warmslot::config::detail {
namespace {

bool tenant_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool has_space_or_control(std::string_view key) {
    return std::any_of(key.begin(), key.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
    });
}

}  // namespace

void reader::read_api_keys(const entry& e, config& c) const {
    c.api_keys.clear();
    c.key_grants.clear();
    if (e.node.IsNull()) return;
    if (!e.node.IsSequence())
        fail(e.line, e.path, "expected a list of keys, found " + std::string(kind_of(e.node)));
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const YAML::Node item = e.node[i];
        const entry item_entry{item, item_path(e.path, i), line_of(item, e.line)};
        std::string key;
        key_grant grant;
        if (item.IsMap()) {
            grant = read_key_grant(item_entry, key);
        } else {
            key = read_api_key(item_entry);  // a plain key: an admin of the default tenant
        }
        const auto same = std::find(c.api_keys.begin(), c.api_keys.end(), key);
        if (same != c.api_keys.end()) {
            const auto first = static_cast<std::size_t>(same - c.api_keys.begin());
            fail(item_entry.line, item_entry.path, "same key as " + item_path(e.path, first));
        }
        c.api_keys.push_back(std::move(key));
        c.key_grants.push_back(std::move(grant));
    }
}

// {key: ..., role: client|observer|admin, tenant: name}; role and tenant are optional. Without
// a role the key is a client: a map is written to limit a key, so it never grants the most.
key_grant reader::read_key_grant(const entry& e, std::string& key) const {
    key_grant out;
    out.role = key_role::client;
    bool have_key = false;
    read_map(e, {{"key",
                  [&](const entry& v) {
                      key = read_api_key(v);
                      have_key = true;
                  }},
                 {"role",
                  [&](const entry& v) {
                      const std::string role = read_scalar(v, "a role");
                      if (role == "client") {
                          out.role = key_role::client;
                      } else if (role == "observer") {
                          out.role = key_role::observer;
                      } else if (role == "admin") {
                          out.role = key_role::admin;
                      } else {
                          fail(v.line, v.path,
                               "unknown role \"" + role + "\"; expected client, observer or admin");
                      }
                  }},
                 {"tenant", [&](const entry& v) {
                      out.tenant = read_scalar(v, "a tenant name");
                      if (out.tenant.empty() || out.tenant.size() > 64 ||
                          !std::all_of(out.tenant.begin(), out.tenant.end(), tenant_char))
                          fail(v.line, v.path, "must be 1 to 64 characters from A-Z a-z 0-9 . _ -");
                  }}});
    if (!have_key) fail(e.line, child_path(e.path, "key"), "is required");
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

// {tenant: size, "*": size}: a budget per tenant; "*" for every tenant not named.
std::vector<std::pair<std::string, std::uint64_t>> reader::read_tenant_budgets(
    const entry& e) const {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    if (e.node.IsNull()) return out;
    if (!e.node.IsMap())
        fail(e.line, e.path,
             "expected a map of tenant names to sizes, found " + std::string(kind_of(e.node)));
    for (const auto& kv : e.node) {
        const int key_line = line_of(kv.first, e.line);
        if (!kv.first.IsScalar()) fail(key_line, e.path, "tenant names must be plain strings");
        const std::string name = kv.first.Scalar();
        const std::string path = e.path + "[\"" + name + "\"]";
        const bool valid = name == "*" || (!name.empty() && name.size() <= 64 &&
                                           std::all_of(name.begin(), name.end(), tenant_char));
        if (!valid)
            fail(key_line, path,
                 "must be a tenant name (1 to 64 characters from A-Z a-z 0-9 . _ -) "
                 "or \"*\" for every other tenant");
        for (const auto& seen : out) {
            if (seen.first == name) fail(key_line, path, "duplicate tenant");
        }
        const int value_line = kv.second.IsNull() ? key_line : line_of(kv.second, key_line);
        out.emplace_back(
            name, read_size(entry{kv.second, path, value_line}, 1024 * 1024, UINT64_MAX / 2));
    }
    return out;
}

void reader::check_tenant_budgets(const entry& cache, const config& c) const {
    if (c.cache.tenant_max_disk.empty()) return;
    const entry budgets{cache.node["tenant_max_disk"], child_path(cache.path, "tenant_max_disk"),
                        cache.line};
    for (const auto& kv : budgets.node) {
        const std::string name = kv.first.Scalar();
        const int line = line_of(kv.first, budgets.line);
        const std::string path = budgets.path + "[\"" + name + "\"]";
        const auto& budget =
            *std::find_if(c.cache.tenant_max_disk.begin(), c.cache.tenant_max_disk.end(),
                          [&](const auto& b) { return b.first == name; });
        if (budget.second > c.cache.max_disk)
            fail(line, path,
                 "must not exceed cache.max_disk (" + util::format_size(c.cache.max_disk) + ")");
        const bool known =
            name == "*" || std::any_of(c.key_grants.begin(), c.key_grants.end(),
                                       [&](const key_grant& g) { return g.tenant == name; });
        if (!known) fail(line, path, "no key in api_keys has tenant \"" + name + "\"");
    }
}

http_settings reader::read_http(const entry& e) const {
    http_settings out;
    read_map(e, {{"allowed_hosts",
                  [&](const entry& v) {
                      out.allowed_hosts = read_list(v, "a host name");
                      out.allowed_hosts_set = true;
                      for (std::size_t i = 0; i < out.allowed_hosts.size(); ++i) {
                          const auto& h = out.allowed_hosts[i];
                          if (h.empty() || h.size() > 253 || h.find(' ') != std::string::npos)
                              fail(v.line, item_path(v.path, i),
                                   "must be a host name or address without spaces");
                      }
                  }},
                 {"cors_origins", [&](const entry& v) {
                      out.cors_origins = read_list(v, "an origin");
                      for (std::size_t i = 0; i < out.cors_origins.size(); ++i) {
                          const auto& o = out.cors_origins[i];
                          const auto rest = o.find("://");
                          const bool scheme = o.starts_with("http://") || o.starts_with("https://");
                          if (!scheme || o.size() == rest + 3 ||
                              o.find_first_of("/ ", rest + 3) != std::string::npos)
                              fail(v.line, item_path(v.path, i),
                                   "must be an origin such as https://app.example or "
                                   "http://localhost:3000 (scheme, host, optional port, no path)");
                      }
                  }}});
    return out;
}

}  // namespace warmslot::config::detail

namespace warmslot::config {

std::vector<std::string> describe_keys(const config& c) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < c.api_keys.size(); ++i) {
        const key_grant g = i < c.key_grants.size() ? c.key_grants[i] : key_grant{};
        const char* role = g.role == key_role::client     ? "client"
                           : g.role == key_role::observer ? "observer"
                                                          : "admin";
        out.push_back(
            "api_keys[" + std::to_string(i) + "]: " + role + " of " +
            (g.tenant.empty() ? std::string("the default tenant") : "tenant " + g.tenant));
    }
    return out;
}

std::optional<std::uint64_t> cache_settings::max_disk_of(std::string_view tenant) const {
    const std::pair<std::string, std::uint64_t>* others = nullptr;
    for (const auto& b : tenant_max_disk) {
        if (b.first == tenant) return b.second;
        if (b.first == "*") others = &b;
    }
    if (others) return others->second;
    return std::nullopt;
}

}  // namespace warmslot::config
