#include "config/reload.hpp"

#include <algorithm>

namespace warmslot::config {
namespace {

// A url backend is its url; a supervised one is its command line (its port is picked at start).
// Never the env values: they may be secrets, and this text goes to the log.
std::string endpoint_of(const backend& b) {
    if (!b.router_model.empty()) return b.url + " model " + b.router_model;
    if (!b.supervised()) return b.url;
    std::string line = "command:";
    for (const auto& arg : b.command) line += " " + arg;
    return line;
}

bool same_models(const backend& a, const backend& b) {
    return a.models == b.models && a.slot_save_path == b.slot_save_path;
}

}  // namespace

std::size_t active_backends(const config& cfg) {
    return static_cast<std::size_t>(std::count_if(cfg.backends.begin(), cfg.backends.end(),
                                                  [](const backend& b) { return !b.retired; }));
}

bool same_backend(const backend& a, const backend& b) {
    return a.name == b.name && endpoint_of(a) == endpoint_of(b) && a.env == b.env;
}

reload_plan plan_reload(const config& running, config parsed) {
    reload_plan out;
    std::vector<backend> fresh = std::move(parsed.backends);
    std::vector<bool> taken(fresh.size(), false);
    std::vector<backend> kept;
    kept.reserve(running.backends.size() + fresh.size());
    for (std::size_t i = 0; i < running.backends.size(); ++i) {
        const backend& old = running.backends[i];
        const auto match = std::find_if(fresh.begin(), fresh.end(),
                                        [&](const backend& b) { return same_backend(old, b); });
        if (match == fresh.end()) {
            kept.push_back(old);
            if (!old.retired) {
                kept.back().retired = true;
                out.retired.push_back(static_cast<int>(i));
                out.changes.push_back("backend " + old.name + " (" + endpoint_of(old) +
                                      "): removed, draining");
            }
            continue;
        }
        taken[static_cast<std::size_t>(match - fresh.begin())] = true;
        kept.push_back(*match);
        kept.back().retired = false;
        if (old.supervised()) {  // the running process keeps its address
            kept.back().host = old.host;
            kept.back().port = old.port;
            kept.back().url = old.url;
            kept.back().child_key = old.child_key;
        }
        if (old.retired) {
            out.added.push_back(static_cast<int>(i));
            out.changes.push_back("backend " + old.name + ": back");
        } else if (!same_models(old, *match)) {
            out.changes.push_back("backend " + old.name + ": models or slot_save_path changed");
        }
    }
    for (std::size_t j = 0; j < fresh.size(); ++j) {
        if (taken[j]) continue;
        out.added.push_back(static_cast<int>(kept.size()));
        out.changes.push_back("backend " + fresh[j].name + " (" + endpoint_of(fresh[j]) +
                              "): added");
        kept.push_back(std::move(fresh[j]));
    }
    parsed.backends = std::move(kept);
    if (parsed.listen.host != running.listen.host || parsed.listen.port != running.listen.port) {
        out.changes.push_back("listen: " + parsed.listen.host + ":" +
                              std::to_string(parsed.listen.port) +
                              " takes effect at the next start; still listening on " +
                              running.listen.host + ":" + std::to_string(running.listen.port));
        parsed.listen = running.listen;
    }
    // The listener speaks TLS or not from its start; with TLS on, the files are read again.
    if (parsed.tls.enabled() != running.tls.enabled()) {
        out.changes.push_back(std::string("tls: turning it ") +
                              (parsed.tls.enabled() ? "on" : "off") +
                              " takes effect at the next start");
        parsed.tls = running.tls;
    }
    // Isolation decides the flags of the llama-servers warmslot starts and every slot file's key:
    // it changes with them, at the next start.
    if (parsed.cache.isolation != running.cache.isolation) {
        out.changes.push_back(std::string("cache.isolation: ") +
                              (parsed.cache.isolated() ? "tenant" : "shared") +
                              " takes effect at the next start");
        parsed.cache.isolation = running.cache.isolation;
        parsed.cache.shared_across_tenants =
            parsed.cache.shared_across_tenants && !running.cache.isolated();
    }
    out.next = std::move(parsed);
    return out;
}

}  // namespace warmslot::config
