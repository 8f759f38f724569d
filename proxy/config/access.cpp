// Who may call warmslot: the keys with their roles and tenants, and what HTTP clients (browsers
// above all) may send: the Host names and the CORS origins.
#include <algorithm>
#include <string>

#include "config/reader.hpp"

namespace warmslot::config::detail {
namespace {

bool tenant_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
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

// {key: ..., role: client|observer|admin, tenant: name}; role and tenant are optional.
key_grant reader::read_key_grant(const entry& e, std::string& key) const {
    key_grant out;
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
