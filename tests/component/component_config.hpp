// The config the in-process component tests start from: loopback port 0, no access log, quiet
// logs and deadlines of a few seconds, so that a test that goes wrong ends soon. Each test
// then sets what it is about.
#pragma once

#include <chrono>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace warmslot::testing {

inline config::config component_config(std::vector<config::backend> backends) {
    using namespace std::chrono_literals;
    config::config c;
    c.listen.port = 0;
    c.backends = std::move(backends);
    c.log.access = false;
    c.log.level = "error";
    c.timeouts.header_read = 5s;
    c.timeouts.body_read = 5s;
    c.timeouts.connect = 2s;
    c.timeouts.upstream_response = 5s;
    c.timeouts.stream_idle = 5s;
    c.timeouts.client_idle = 5s;
    return c;
}

}  // namespace warmslot::testing
