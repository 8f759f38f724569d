// listen, limits and timeouts: the listener's address, what a request may bring, its deadlines.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "config/address.hpp"
#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using warmslot::test::bad_case;
using warmslot::test::one_backend;

namespace {

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

}  // namespace

TEST_CASE("config: listen is validated") {
    const bad_case cases[] = {
        {"listen: 127.0.0.1\n", "listen", 1, "expected host:port"},
        {"listen: example.com:80\n", "listen", 1, "IPv4 address, localhost or [IPv6"},
        {"listen: 127.0.0.1:65536\n", "listen", 1, "port must be a number from 0 to 65535"},
        {"listen: 127.0.0.1:-1\n", "listen", 1, "port must be"},
        {"listen: 127.0.0.1:http\n", "listen", 1, "port must be"},
        {"listen: \":8080\"\n", "listen", 1, "missing host"},
        {"listen: ::1:8080\n", "listen", 1, "needs brackets"},
        {"listen: \"[::1:8080\"\n", "listen", 1, "missing ']'"},
        {"listen: \"[nope]:8080\"\n", "listen", 1, "invalid IPv6"},
        {"listen: \"[::1]8080\"\n", "listen", 1, "unexpected text after the host"},
        {"listen: 256.0.0.1:80\n", "listen", 1, "IPv4 address"},
        {"listen: [127.0.0.1, 80]\n", "listen", 1, "expected host:port, found a list"},
        {"\nlisten:\n", "listen", 2, "found no value"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: limits are validated") {
    const bad_case cases[] = {
        {"limits:\n  max_header_bytes: 1023\n", "limits.max_header_bytes", 2,
         "must be from 1KiB to 1MiB"},
        {"limits:\n  max_header_bytes: 1.5MiB\n", "limits.max_header_bytes", 2,
         "must be from 1KiB to 1MiB"},
        {"limits:\n  max_header_bytes: lots\n", "limits.max_header_bytes", 2, "invalid size"},
        {"limits:\n  max_header_bytes: -1KiB\n", "limits.max_header_bytes", 2, "negative"},
        {"limits:\n  max_body_bytes: 5GiB\n", "limits.max_body_bytes", 2,
         "must be from 1KiB to 4GiB"},
        {"limits:\n  max_body_bytes: 10XB\n", "limits.max_body_bytes", 2, "unknown unit \"XB\""},
        {"limits:\n  max_body_bytes: [1]\n", "limits.max_body_bytes", 2, "found a list"},
        {"limits:\n  max_header_count: 7\n", "limits.max_header_count", 2, "from 8 to 10000"},
        {"limits:\n  max_header_count: 10001\n", "limits.max_header_count", 2, "from 8 to 10000"},
        {"limits:\n  max_header_count: many\n", "limits.max_header_count", 2, "whole number"},
        {"limits:\n  max_connections: 0\n", "limits.max_connections", 2, "from 1 to 100000"},
        {"limits:\n  max_connections: 100001\n", "limits.max_connections", 2, "from 1 to 100000"},
        {"limits:\n  max_connections: -5\n", "limits.max_connections", 2, "whole number"},
        {"limits:\n  max_connections: 1.5\n", "limits.max_connections", 2, "whole number"},
        {"limits:\n  max_connections: ten\n", "limits.max_connections", 2, "whole number"},
        {"limits:\n  max_connections: 99999999999999999999999\n", "limits.max_connections", 2,
         "whole number"},
        {"limits: 5\n", "limits", 1, "expected a map, found a scalar"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: timeouts are validated") {
    const bad_case cases[] = {
        {"timeouts:\n  connect: 10\n", "timeouts.connect", 2, "missing unit"},
        {"timeouts:\n  header_read: 0s\n", "timeouts.header_read", 2, "greater than 0"},
        {"timeouts:\n  body_read: 25h\n", "timeouts.body_read", 2, "at most 24h"},
        {"timeouts:\n  upstream_response: 86400001ms\n", "timeouts.upstream_response", 2,
         "at most 24h"},
        {"timeouts:\n  stream_idle: fast\n", "timeouts.stream_idle", 2, "invalid duration"},
        {"timeouts:\n  client_idle: -1s\n", "timeouts.client_idle", 2, "negative"},
        {"timeouts:\n  shutdown_grace: {s: 1}\n", "timeouts.shutdown_grace", 2, "found a map"},
        {"timeouts:\n  connect:\n  body_read: 1s\n", "timeouts.connect", 2, "found no value"},
        {"timeouts: [1s]\n", "timeouts", 1, "expected a map, found a list"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: IP literals are recognized like inet_pton does") {
    struct row {
        std::string_view text;
        bool v4;
        bool v6;
    };
    const row rows[] = {
        {"127.0.0.1", true, false},
        {"0.0.0.0", true, false},
        {"255.255.255.255", true, false},
        {"256.0.0.1", false, false},
        {"1.2.3", false, false},
        {"1.2.3.4.5", false, false},
        {"01.2.3.4", false, false},
        {"1..3.4", false, false},
        {"1.2.3.4.", false, false},
        {"", false, false},
        {"::", false, true},
        {"::1", false, true},
        {"fe80::1:2", false, true},
        {"1:2:3:4:5:6:7:8", false, true},
        {"1:2:3:4:5:6:7::", false, true},
        {"::ffff:127.0.0.1", false, true},
        {"1:2:3:4:5:6:1.2.3.4", false, true},
        {"1:2:3:4:5:6:7", false, false},
        {"1:2:3:4:5:6:7:8:9", false, false},
        {"1::2::3", false, false},
        {"12345::", false, false},
        {"g::1", false, false},
        {":1::", false, false},
        {"1::2:", false, false},
        {"1.2.3.4::", false, false},
        {"::1.2.3", false, false},
        {"1:2:3:4:5:6:7:1.2.3.4", false, false},
        {"nope", false, false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.text);
        CHECK(cfg::detail::is_ipv4_literal(r.text) == r.v4);
        CHECK(cfg::detail::is_ipv6_literal(r.text) == r.v6);
    }
}
