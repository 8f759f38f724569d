// What a running warmslot switches to when its config file changes: pure, no I/O.
//
// Backends keep their index for the life of the process, because slot beliefs, pools and the
// disk tier are keyed by it: a backend is the same backend across a reload when its name and
// its endpoint (url, or supervised command and its `env`) are unchanged. A backend missing from the
// new file stays in the list as `retired` (it drains: no new requests, running ones finish); a new
// or changed one is appended. A retired backend that comes back takes its old index again.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace warmslot::config {

struct reload_plan {
    config next;                       // the snapshot to publish
    std::vector<std::string> changes;  // one line per change, for the log ("backend b: added")
    std::vector<int> retired;          // indexes that stop taking requests with this reload
    std::vector<int> added;            // indexes that start (appended or returning)
};

// Backends that take requests (not retired).
std::size_t active_backends(const config& cfg);

// Same backend across a reload: same name and endpoint (url, or command line and env: a
// process started with other variables is another process).
bool same_backend(const backend& a, const backend& b);

// `running` is the snapshot in use, `parsed` the freshly validated file. Settings that only
// take effect at start (listen address, TLS on or off) keep their running value and say so in
// `changes`. With TLS on before and after, the new certificate and key files are used.
reload_plan plan_reload(const config& running, config parsed);

}  // namespace warmslot::config
