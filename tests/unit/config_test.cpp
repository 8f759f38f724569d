#include "config/config.hpp"
#include "config/address.hpp"
#include "config_fixtures.hpp"

#include <doctest/doctest.h>

#include <tuple>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

namespace cfg = warmslot::config;
using std::chrono::milliseconds;

namespace {

constexpr std::string_view one_backend =
    "backends:\n"
    "  - name: a\n"
    "    url: http://127.0.0.1:8081\n";

// Secrets a test environment knows; none of these may ever show up in an error message.
const std::map<std::string, std::string>& fake_vars() {
    static const std::map<std::string, std::string> vars{
        {"WS_KEY", "sk-live-0123456789"}, {"WS_KEY2", "sk-live-abcdefghij"}, {"WS_EMPTY", ""},
        {"WS_SHORT", "tiny7ch"},          {"WS_SPACE", "has a space in it"},
    };
    return vars;
}

cfg::env_lookup fake_env() {
    return [](const std::string& name) -> std::optional<std::string> {
        const auto it = fake_vars().find(name);
        if (it == fake_vars().end()) return std::nullopt;
        return it->second;
    };
}

cfg::config parse(std::string_view yaml) { return cfg::parse(yaml, "test.yaml", fake_env()); }

bool contains(std::string_view text, std::string_view part) {
    return text.find(part) != std::string_view::npos;
}

using warmslot::test::bad_case;

// Refused as `c` says, and no secret of the environment in the message.
void check_rejected(const bad_case& c) {
    const std::string message =
        warmslot::test::check_rejected(c, [](std::string_view y) { parse(y); });
    for (const auto& [name, value] : fake_vars()) {
        if (!value.empty()) CHECK_FALSE(contains(message, value));
    }
}

}  // namespace

TEST_CASE("config: minimal file gets every default") {
    const cfg::config c = parse(one_backend);
    CHECK(c.listen.host == "127.0.0.1");
    CHECK(c.listen.port == 8080);
    REQUIRE(c.backends.size() == 1);
    CHECK(c.backends[0].name == "a");
    CHECK(c.backends[0].url == "http://127.0.0.1:8081");
    CHECK(c.backends[0].host == "127.0.0.1");
    CHECK(c.backends[0].port == 8081);
    CHECK(c.api_keys.empty());
    CHECK(c.limits.max_header_bytes == 16 * 1024);
    CHECK(c.limits.max_header_count == 100);
    CHECK(c.limits.max_body_bytes == 64 * 1024 * 1024);
    CHECK(c.limits.max_connections == 1024);
    CHECK(c.timeouts.header_read == milliseconds{10'000});
    CHECK(c.timeouts.body_read == milliseconds{60'000});
    CHECK(c.timeouts.connect == milliseconds{5'000});
    CHECK(c.timeouts.upstream_response == milliseconds{3'600'000});
    CHECK(c.timeouts.stream_idle == milliseconds{1'800'000});
    CHECK(c.timeouts.stream_keepalive == milliseconds{10'000});
    CHECK(c.timeouts.client_idle == milliseconds{60'000});
    CHECK(c.timeouts.shutdown_grace == milliseconds{10'000});
    CHECK(c.log.level == "info");
    CHECK(c.log.access == true);
}

TEST_CASE("config: every key set") {
    const cfg::config c = parse(
        "listen: \"[::1]:0\"\n"
        "backends:\n"
        "  - name: gpu-0.main_1\n"
        "    url: http://10.0.0.7:9000/\n"
        "  - name: b\n"
        "    url: http://llama.internal\n"
        "  - url: \"http://[fe80::1]:8081\"\n"
        "    name: c\n"
        "api_keys:\n"
        "  - ${WS_KEY}\n"
        "  - \"${WS_KEY2}\"\n"
        "  - literal-key-1\n"
        "limits:\n"
        "  max_header_bytes: 32KiB\n"
        "  max_header_count: 500\n"
        "  max_body_bytes: 1.5GB\n"
        "  max_connections: 100000\n"
        "timeouts:\n"
        "  header_read: 250ms\n"
        "  body_read: 30s\n"
        "  connect: 1.5s\n"
        "  upstream_response: 2h\n"
        "  stream_idle: 5m\n"
        "  stream_keepalive: 2s\n"
        "  client_idle: 24h\n"
        "  shutdown_grace: 1ms\n"
        "log:\n"
        "  level: debug\n"
        "  access: false\n"
        "dashboard:\n"
        "  enabled: false\n"
        "  previews: false\n");
    CHECK(c.listen.host == "::1");
    CHECK(c.listen.port == 0);
    REQUIRE(c.backends.size() == 3);
    CHECK(c.backends[0].name == "gpu-0.main_1");
    CHECK(c.backends[0].url == "http://10.0.0.7:9000/");
    CHECK(c.backends[0].host == "10.0.0.7");
    CHECK(c.backends[0].port == 9000);
    CHECK(c.backends[1].host == "llama.internal");
    CHECK(c.backends[1].port == 80);
    CHECK(c.backends[2].name == "c");
    CHECK(c.backends[2].host == "fe80::1");
    CHECK(c.backends[2].port == 8081);
    REQUIRE(c.api_keys.size() == 3);
    CHECK(c.api_keys[0] == "sk-live-0123456789");
    CHECK(c.api_keys[1] == "sk-live-abcdefghij");
    CHECK(c.api_keys[2] == "literal-key-1");
    CHECK(c.limits.max_header_bytes == 32 * 1024);
    CHECK(c.limits.max_header_count == 500);
    CHECK(c.limits.max_body_bytes == 1'500'000'000);
    CHECK(c.limits.max_connections == 100'000);
    CHECK(c.timeouts.header_read == milliseconds{250});
    CHECK(c.timeouts.body_read == milliseconds{30'000});
    CHECK(c.timeouts.connect == milliseconds{1'500});
    CHECK(c.timeouts.upstream_response == milliseconds{7'200'000});
    CHECK(c.timeouts.stream_idle == milliseconds{300'000});
    CHECK(c.timeouts.stream_keepalive == milliseconds{2'000});
    CHECK(c.timeouts.client_idle == milliseconds{86'400'000});
    CHECK(c.timeouts.shutdown_grace == milliseconds{1});
    CHECK(c.log.level == "debug");
    CHECK(c.log.access == false);
    CHECK(c.dashboard.enabled == false);
    CHECK(c.dashboard.previews == false);
}

TEST_CASE("config: accepted variants") {
    SUBCASE("empty sections keep their defaults") {
        const cfg::config c =
            parse(std::string(one_backend) + "api_keys:\nlimits:\ntimeouts:\nlog:\ndashboard:\n");
        CHECK(c.api_keys.empty());
        CHECK(c.limits.max_connections == 1024);
        CHECK(c.timeouts.connect == milliseconds{5'000});
        CHECK(c.log.level == "info");
        CHECK(c.dashboard.enabled);
        CHECK(c.dashboard.previews);
    }
    SUBCASE("an explicit empty key list means no authentication") {
        CHECK(parse(std::string(one_backend) + "api_keys: []\n").api_keys.empty());
    }
    SUBCASE("listen forms") {
        CHECK(parse(std::string(one_backend) + "listen: localhost:1\n").listen.host == "localhost");
        const cfg::config any = parse(std::string(one_backend) + "listen: 0.0.0.0:65535\n");
        CHECK(any.listen.host == "0.0.0.0");
        CHECK(any.listen.port == 65535);
    }
    SUBCASE("range limits are inclusive") {
        const cfg::config c = parse(std::string(one_backend) +
                                    "limits: {max_header_bytes: 1MiB, max_body_bytes: 4GiB,"
                                    " max_connections: 1}\n");
        CHECK(c.limits.max_header_bytes == 1024 * 1024);
        CHECK(c.limits.max_body_bytes == 4ULL * 1024 * 1024 * 1024);
        CHECK(c.limits.max_connections == 1);
    }
    SUBCASE("sizes may be plain byte counts") {
        CHECK(parse(std::string(one_backend) + "limits:\n  max_header_bytes: 2048\n")
                  .limits.max_header_bytes == 2048);
    }
    SUBCASE("every log level") {
        for (const char* level : {"trace", "debug", "info", "warn", "error", "off"}) {
            CAPTURE(level);
            CHECK(parse(std::string(one_backend) + "log:\n  level: " + level + "\n").log.level ==
                  level);
        }
    }
}

TEST_CASE("config: unknown and misplaced keys name their path and line") {
    const bad_case cases[] = {
        {"listen: 127.0.0.1:1\nbackend: []\n", "backend", 2, "unknown key"},
        {"limits:\n  max_body: 1MiB\n", "limits.max_body", 2, "unknown key; expected one of"},
        {"backends:\n  - name: a\n    url: http://h:1\n  - name: b\n    nmae: c\n",
         "backends[1].nmae", 5, "unknown key; expected one of: name, url"},
        {"timeouts:\n\n  read: 1s\n", "timeouts.read", 3, "unknown key"},
        {"log:\n  level: info\n  format: json\n", "log.format", 3, "unknown key"},
        {"listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", "listen", 2,
         "duplicate key (first at line 1)"},
        {"limits:\n  max_connections: 1\n  max_connections: 2\n", "limits.max_connections", 3,
         "duplicate key"},
        {"? [a, b]\n: 1\n", "", 1, "keys must be plain strings"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: document-level problems") {
    const bad_case cases[] = {
        {"", "", 1, "empty"},
        {"# nothing but a comment\n", "", 1, "empty"},
        {"~\n", "", 1, "empty"},
        {"\n- a\n- b\n", "", 2, "expected a map of settings, found a list"},
        {"just text\n", "", 1, "expected a map of settings, found a scalar"},
        {"listen: 127.0.0.1:1\n", "backends", 1, "is required"},
        {"backends: [\n  {name: a\n", "", 3, "invalid YAML"},
        {"listen: 1\n  bad: indent\n", "", 2, "invalid YAML"},
        {"backends: *nowhere\n", "", 1, "invalid YAML"},
        {"backends: []\n---\nlisten: 1\n", "", 3, "only one YAML document"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

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

TEST_CASE("config: backends are validated") {
    const bad_case cases[] = {
        {"backends: []\n", "backends", 1, "non-empty list of backends, found an empty list"},
        {"backends:\n", "backends", 1, "found no value"},
        {"backends: http://h:1\n", "backends", 1, "found a scalar"},
        {"backends:\n  - http://h:1\n", "backends[0]", 2, "expected a map with name and url"},
        {"backends:\n  - url: http://h:1\n", "backends[0].name", 2, "is required"},
        {"backends:\n  - name: a\n", "backends[0].url", 2, "is required"},
        {"backends:\n  - name: a b\n    url: http://h:1\n", "backends[0].name", 2,
         "1 to 64 characters"},
        {"backends:\n  - name: \"\"\n    url: http://h:1\n", "backends[0].name", 2,
         "1 to 64 characters"},
        {"backends:\n  - name: " + std::string(65, 'x') + "\n    url: http://h:1\n",
         "backends[0].name", 2, "1 to 64 characters"},
        {"backends:\n  - name: [a]\n", "backends[0].name", 2, "expected a name, found a list"},
        {"backends:\n  - {name: a, url: http://h:1}\n  - {name: a, url: http://h:2}\n",
         "backends[1].name", 3, "duplicate backend name \"a\" (also backends[0])"},
        {"backends:\n  - name: a\n    url: https://h:1\n", "backends[0].url", 3,
         "https is not supported"},
        {"backends:\n  - name: a\n    url: ftp://h:1\n", "backends[0].url", 3,
         "must start with http://"},
        {"backends:\n  - name: a\n    url: h:1\n", "backends[0].url", 3, "must start with http://"},
        {"backends:\n  - name: a\n    url: http://h:1/v1\n", "backends[0].url", 3,
         "must not have a path"},
        {"backends:\n  - name: a\n    url: http://h:1//\n", "backends[0].url", 3,
         "must not have a path"},
        {"backends:\n  - name: a\n    url: http://h:1/?x=1\n", "backends[0].url", 3,
         "must not have a query"},
        {"backends:\n  - name: a\n    url: http://u:p@h:1\n", "backends[0].url", 3,
         "must not contain user info"},
        {"backends:\n  - name: a\n    url: http://h:0\n", "backends[0].url", 3,
         "port must be a number from 1 to 65535"},
        {"backends:\n  - name: a\n    url: http://h:70000\n", "backends[0].url", 3,
         "port must be a number from 1"},
        {"backends:\n  - name: a\n    url: http://:8080\n", "backends[0].url", 3, "missing host"},
        {"backends:\n  - name: a\n    url: http://bad_host:1\n", "backends[0].url", 3,
         "invalid host name"},
        {"backends:\n  - name: a\n    url: http://::1:80\n", "backends[0].url", 3,
         "needs brackets"},
        {"backends:\n  - name: a\n    url: {host: h}\n", "backends[0].url", 3,
         "expected a URL, found a map"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: api_keys are validated without revealing them") {
    const bad_case cases[] = {
        {"api_keys: sk-live-0123456789\n", "api_keys", 1, "expected a list of keys"},
        {"api_keys:\n  - short7!\n", "api_keys[0]", 2, "key is too short (at least 8"},
        {"api_keys:\n  - ${WS_MISSING}\n", "api_keys[0]", 2,
         "environment variable WS_MISSING is not set"},
        {"api_keys:\n  - ${WS_EMPTY}\n", "api_keys[0]", 2,
         "environment variable WS_EMPTY is empty"},
        {"api_keys:\n  - ${WS_SHORT}\n", "api_keys[0]", 2,
         "key from environment variable WS_SHORT is too short"},
        {"api_keys:\n  - ${WS_SPACE}\n", "api_keys[0]", 2, "must not contain spaces"},
        {"api_keys:\n  - \"sk live 0123\"\n", "api_keys[0]", 2, "must not contain spaces"},
        {"api_keys:\n  - ${WS_KEY\n", "api_keys[0]", 2, "malformed environment reference"},
        {"api_keys:\n  - prefix-${WS_KEY}\n", "api_keys[0]", 2, "malformed environment"},
        {"api_keys:\n  - ${1BAD}\n", "api_keys[0]", 2, "malformed environment"},
        {"api_keys:\n  - ${WS_KEY}\n  - sk-live-0123456789\n", "api_keys[1]", 3,
         "same key as api_keys[0]"},
        {"api_keys:\n  - [sk-live-0123456789]\n", "api_keys[0]", 2, "expected a string, found"},
    };
    for (const bad_case& c : cases) check_rejected(c);

    // The literal keys from the file must not leak either.
    for (std::string_view yaml :
         {"api_keys:\n  - short7!\n", "api_keys:\n  - \"sk live 0123\"\n"}) {
        try {
            parse(yaml);
            FAIL("accepted a bad key");
        } catch (const cfg::config_error& e) {
            CHECK_FALSE(contains(e.what(), "short7!"));
            CHECK_FALSE(contains(e.what(), "sk live"));
        }
    }
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
        {"limits:\n  max_header_count: 10001\n", "limits.max_header_count", 2,
         "from 8 to 10000"},
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

TEST_CASE("config: log is validated") {
    const bad_case cases[] = {
        {"log:\n  level: verbose\n", "log.level", 2, "unknown level \"verbose\""},
        {"log:\n  level: INFO\n", "log.level", 2, "unknown level"},
        {"log:\n  access: abc\n", "log.access", 2, "expected true or false, found \"abc\""},
        {"log:\n  access: yes\n", "log.access", 2, "expected true or false"},
        {"log:\n  access: 1\n", "log.access", 2, "expected true or false"},
        {"log:\n  access: [true]\n", "log.access", 2, "found a list"},
        {"dashboard:\n  previews: no\n", "dashboard.previews", 2, "expected true or false"},
        {"dashboard:\n  preview: false\n", "dashboard.preview", 2, "unknown key"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: config_error message format") {
    const cfg::config_error with_line("warmslot.yaml", 7, "backends[1].url",
                                      "must start with http://");
    CHECK(std::string(with_line.what()) ==
          "warmslot.yaml:7: backends[1].url: must start with http://");
    CHECK(with_line.line() == 7);
    CHECK(with_line.key_path() == "backends[1].url");
    CHECK(with_line.problem() == "must start with http://");

    const cfg::config_error no_line("/etc/w.yaml", 0, "", "cannot open: No such file");
    CHECK(std::string(no_line.what()) == "/etc/w.yaml: cannot open: No such file");
}

TEST_CASE("config: load_file") {
    const std::filesystem::path dir = std::filesystem::temp_directory_path();
    const std::string path =
        (dir / ("warmslot_config_test_" + std::to_string(::getpid()) + ".yaml")).string();

    SUBCASE("reads and parses the file, naming it in errors") {
        {
            std::ofstream out(path);
            out << one_backend << "log:\n  level: warn\n";
        }
        CHECK(cfg::load_file(path, fake_env()).log.level == "warn");
        {
            std::ofstream out(path);
            out << one_backend << "log:\n  level: loud\n";
        }
        try {
            cfg::load_file(path, fake_env());
            FAIL("accepted a bad level");
        } catch (const cfg::config_error& e) {
            CHECK(std::string(e.what()) == path +
                                               ":5: log.level: unknown level \"loud\"; "
                                               "expected trace, debug, info, warn, error or off");
        }
        std::filesystem::remove(path);
    }
    SUBCASE("a missing file is an error naming the path") {
        const std::string missing = path + ".missing";
        try {
            cfg::load_file(missing, fake_env());
            FAIL("loaded a missing file");
        } catch (const cfg::config_error& e) {
            CHECK(e.line() == 0);
            CHECK(std::string(e.what()) == missing + ": cannot open: No such file or directory");
        }
    }
    SUBCASE("a directory is an error") {
        try {
            cfg::load_file(dir.string(), fake_env());
            FAIL("loaded a directory");
        } catch (const cfg::config_error& e) {
            CHECK(contains(e.what(), "is a directory"));
        }
    }
}

TEST_CASE("config: process_env reads the real environment") {
    const std::string name = "WARMSLOT_CONFIG_TEST_" + std::to_string(::getpid());
    const cfg::env_lookup env = cfg::process_env();
    CHECK_FALSE(env(name).has_value());
    ::setenv(name.c_str(), "value-from-env", 1);
    CHECK(env(name) == std::optional<std::string>("value-from-env"));
    ::unsetenv(name.c_str());
    CHECK_FALSE(env(name).has_value());
}

TEST_CASE("config: routing settings and backend model names") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const auto c = warmslot::config::parse(
        "backends:\n"
        "  - name: a\n"
        "    url: http://127.0.0.1:9000\n"
        "    models: [qwen3-8b, default]\n"
        "routing:\n"
        "  enabled: false\n"
        "  short_request_tokens: 200\n"
        "  long_segment_tokens: 64\n"
        "  scratch_slot: false\n"
        "  max_wait: 30s\n"
        "  reconcile_interval: 250ms\n",
        "test.yaml", env);
    CHECK(c.backends[0].models == std::vector<std::string>{"qwen3-8b", "default"});
    CHECK_FALSE(c.routing.enabled);
    CHECK(c.routing.short_request_tokens == 200);
    CHECK(c.routing.long_segment_tokens == 64);
    CHECK_FALSE(c.routing.scratch_slot);
    CHECK(c.routing.max_wait == std::chrono::seconds(30));
    CHECK(c.routing.reconcile_interval == std::chrono::milliseconds(250));

    const auto defaults = warmslot::config::parse(
        "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n", "test.yaml", env);
    CHECK(defaults.routing.enabled);
    CHECK(defaults.routing.short_request_tokens == 1000);
    CHECK(defaults.routing.reconcile_interval == std::chrono::seconds(1));

    struct bad_case {
        const char* yaml;
        const char* path;
        int line;
    };
    for (const auto& b : {bad_case{"routing:\n  enabled: maybe\n", "routing.enabled", 6},
                          bad_case{"routing:\n  max_wait: 10\n", "routing.max_wait", 6},
                          bad_case{"routing:\n  scrach_slot: true\n", "routing.scrach_slot", 6},
                          bad_case{"routing:\n  long_segment_tokens: 0\n",
                                   "routing.long_segment_tokens", 6}}) {
        const std::string yaml =
            std::string("backends:\n  - name: a\n    url: http://127.0.0.1:9000\n\n") + b.yaml;
        try {
            warmslot::config::parse(yaml, "test.yaml", env);
            FAIL("accepted: " << b.yaml);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == b.path);
            CHECK(e.line() == b.line);
        }
    }
    try {
        warmslot::config::parse(
            "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n    models: qwen\n",
            "test.yaml", env);
        FAIL("a scalar models was accepted");
    } catch (const warmslot::config::config_error& e) {
        CHECK(e.key_path() == "backends[0].models");
        CHECK(e.line() == 4);
    }
}

TEST_CASE("config: rewrite defaults are off and models override the default block") {
    const cfg::config none = parse(one_backend);
    CHECK(none.rewrite.defaults.volatile_presets.empty());
    CHECK(none.rewrite.defaults.volatile_patterns.empty());
    CHECK_FALSE(none.rewrite.defaults.document_order);
    CHECK(none.rewrite.defaults.edits == cfg::edit_mode::reprocess);
    CHECK(none.rewrite.defaults.document_min_bytes == 2048);
    CHECK(none.rewrite.memory == 64ull * 1024 * 1024);
    CHECK(none.rewrite.models.empty());

    // models before default: the order in the file does not matter
    const cfg::config c = parse(std::string(one_backend) +
                                "rewrite:\n"
                                "  memory: 16MiB\n"
                                "  models:\n"
                                "    qwen3.5-9b:\n"
                                "      system_messages: front\n"
                                "      documents:\n"
                                "        edits: append\n"
                                "        edit_similarity: 0.6\n"
                                "    plain: {}\n"
                                "  default:\n"
                                "    volatile_lines:\n"
                                "      presets: [date, time]\n"
                                "      patterns: ['^Session: ']\n"
                                "      mark: false\n"
                                "    documents:\n"
                                "      min_bytes: 4KiB\n"
                                "      order: true\n"
                                "      delimiters:\n"
                                "        - begin: '<document[^>]*>'\n"
                                "          end: '</document>'\n"
                                "      edit_id: '<document id=\"([^\"]+)\"'\n"
                                "      max_note_bytes: 8KiB\n");
    CHECK(c.rewrite.memory == 16ull * 1024 * 1024);
    const auto& d = c.rewrite.defaults;
    CHECK(d.volatile_presets == std::vector<std::string>{"date", "time"});
    CHECK(d.volatile_patterns == std::vector<std::string>{"^Session: "});
    CHECK_FALSE(d.volatile_mark);
    CHECK(cfg::rewrite_rules{}.volatile_mark);  // marked unless said otherwise
    CHECK(d.document_min_bytes == 4096);
    CHECK(d.document_order);
    REQUIRE(d.document_delimiters.size() == 1);
    CHECK(d.document_delimiters[0].begin == "<document[^>]*>");
    CHECK(d.document_delimiters[0].end == "</document>");
    CHECK(d.edit_id == "<document id=\"([^\"]+)\"");  // the example config's
    CHECK(d.max_note_bytes == 8192);
    const auto& q = c.rewrite.for_model("qwen3.5-9b");
    CHECK(q.edits == cfg::edit_mode::append);
    CHECK(q.edit_similarity == doctest::Approx(0.6));
    CHECK(q.document_order);  // inherited
    CHECK(q.system_to_front);
    CHECK_FALSE(d.system_to_front);
    CHECK(q.volatile_presets == d.volatile_presets);
    CHECK(&c.rewrite.for_model("plain") != &d);
    CHECK(c.rewrite.for_model("plain").edits == cfg::edit_mode::reprocess);
    CHECK(&c.rewrite.for_model("unknown") == &d);
    for (const auto name : cfg::volatile_preset_names()) CHECK(cfg::volatile_preset(name).has_value());
    CHECK_FALSE(cfg::volatile_preset("weekday").has_value());
}

TEST_CASE("config: rewrite is validated strictly") {
    const std::string head = std::string(one_backend) + "rewrite:\n";  // rewrite: is line 4
    const bad_case cases[] = {
        {head + "  defaults: {}\n", "rewrite.defaults", 5, "unknown key; expected one of: memory, default, models"},
        {head + "  default:\n    volatile:\n      presets: [date]\n", "rewrite.default.volatile", 6, "unknown key"},
        {head + "  default:\n    system_messages: first\n", "rewrite.default.system_messages", 6,
         "expected keep or front, found \"first\""},
        {head + "  default:\n    volatile_lines:\n      presets: [date, weekday]\n",
         "rewrite.default.volatile_lines.presets[1]", 7, "unknown preset; expected one of: date, time"},
        {head + "  default:\n    volatile_lines:\n      patterns: ['(unclosed']\n",
         "rewrite.default.volatile_lines.patterns[0]", 7, "invalid regular expression"},
        {head + "  default:\n    volatile_lines:\n      mark: maybe\n", "rewrite.default.volatile_lines.mark", 7,
         "expected true or false"},
        {head + "  default:\n    volatile_lines:\n      patterns: date\n",
         "rewrite.default.volatile_lines.patterns", 7, "expected a list"},
        {head + "  default:\n    documents:\n      edits: sometimes\n", "rewrite.default.documents.edits", 7,
         "expected reprocess or append"},
        {head + "  default:\n    documents:\n      edit_similarity: 1.5\n",
         "rewrite.default.documents.edit_similarity", 7, "from 0.1 to 1"},
        {head + "  default:\n    documents:\n      edit_id: 'id=\\w+'\n", "rewrite.default.documents.edit_id", 7,
         "needs a capture group"},
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d>'\n",
         "rewrite.default.documents.delimiters[0].end", 8, "is required"},
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d>'\n          end: '[x'\n",
         "rewrite.default.documents.delimiters[0].end", 9, "invalid regular expression"},
        // RE2 syntax: lookaround and backreferences (ECMAScript has them) are refused at load.
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d(?=>)'\n          end: '</d>'\n",
         "rewrite.default.documents.delimiters[0].begin", 8, "invalid regular expression (RE2 syntax"},
        {head + "  default:\n    volatile_lines:\n      patterns: ['(?<!x)date']\n",
         "rewrite.default.volatile_lines.patterns[0]", 7, "no lookahead or lookbehind"},
        {head + "  default:\n    documents:\n      edit_id: '(a)\\1'\n", "rewrite.default.documents.edit_id", 7,
         "no backreferences"},
        {head + "  models:\n    q:\n      documents:\n        order: often\n",
         "rewrite.models[\"q\"].documents.order", 8, "expected true or false"},
        {head + "  models:\n    q: {}\n    q: {}\n", "rewrite.models[\"q\"]", 7, "duplicate"},
        {head + "  models: [q]\n", "rewrite.models", 5, "expected a map of model names"},
        {head + "  memory: 1KiB\n", "rewrite.memory", 5, "must be from"},
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
        {"127.0.0.1", true, false},       {"0.0.0.0", true, false},
        {"255.255.255.255", true, false}, {"256.0.0.1", false, false},
        {"1.2.3", false, false},          {"1.2.3.4.5", false, false},
        {"01.2.3.4", false, false},       {"1..3.4", false, false},
        {"1.2.3.4.", false, false},       {"", false, false},
        {"::", false, true},              {"::1", false, true},
        {"fe80::1:2", false, true},       {"1:2:3:4:5:6:7:8", false, true},
        {"1:2:3:4:5:6:7::", false, true}, {"::ffff:127.0.0.1", false, true},
        {"1:2:3:4:5:6:1.2.3.4", false, true},
        {"1:2:3:4:5:6:7", false, false},  {"1:2:3:4:5:6:7:8:9", false, false},
        {"1::2::3", false, false},        {"12345::", false, false},
        {"g::1", false, false},           {":1::", false, false},
        {"1::2:", false, false},          {"1.2.3.4::", false, false},
        {"::1.2.3", false, false},        {"1:2:3:4:5:6:7:1.2.3.4", false, false},
        {"nope", false, false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.text);
        CHECK(cfg::detail::is_ipv4_literal(r.text) == r.v4);
        CHECK(cfg::detail::is_ipv6_literal(r.text) == r.v6);
    }
}

TEST_CASE("config: cache.slot_call_timeout is a positive duration") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env)
              .cache.slot_call_timeout == std::chrono::minutes(2));
    CHECK(warmslot::config::parse(head + "  slot_call_timeout: 750ms\n", "test.yaml", env)
              .cache.slot_call_timeout == std::chrono::milliseconds(750));
    for (const char* bad : {"  slot_call_timeout: 0s\n", "  slot_call_timeout: 10\n",
                            "  slot_call_timeout: 25h\n"}) {
        try {
            warmslot::config::parse(head + bad, "test.yaml", env);
            FAIL("accepted: " << bad);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == "cache.slot_call_timeout");
            CHECK(e.line() == 5);
        }
    }
}

TEST_CASE("config: the shared tier: off by default; an absolute directory apart from slot directories") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\n"
                             "    slot_save_path: /srv/slots/a\ncache:\n  dir: /srv/state\n";
    const auto off = warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache;
    CHECK(off.shared_dir.empty());
    CHECK(off.shared_max_disk == 50ull * 1024 * 1024 * 1024);
    CHECK(off.shared_timeout == std::chrono::milliseconds(2000));
    const auto on = warmslot::config::parse(
        head + "  shared_dir: /mnt/shared/\n  shared_max_disk: 2GiB\n  shared_timeout: 500ms\n",
        "test.yaml", env).cache;
    CHECK(on.shared_dir == "/mnt/shared");
    CHECK(on.shared_max_disk == 2ull * 1024 * 1024 * 1024);
    CHECK(on.shared_timeout == std::chrono::milliseconds(500));
    for (const auto& [bad, path, problem] :
         {std::tuple{"  shared_dir: relative/dir\n", "cache.shared_dir", "absolute"},
          std::tuple{"  shared_dir: /srv/slots/a\n", "cache.shared_dir", "backend a's slot directory"},
          std::tuple{"  shared_dir: /srv/state\n", "cache.shared_dir", "is cache.dir"},
          std::tuple{"  shared_max_disk: 10\n", "cache.shared_max_disk", ""},
          std::tuple{"  shared_timeout: 0s\n", "cache.shared_timeout", ""}}) {
        try {
            warmslot::config::parse(head + bad, "test.yaml", env);
            FAIL("accepted: " << bad);
        } catch (const warmslot::config::config_error& e) {
            CHECK(e.key_path() == path);
            CHECK(e.line() == 7);
            CHECK(std::string(e.what()).find(problem) != std::string::npos);
        }
    }
}

TEST_CASE("config: cache.save_after_answer is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache.save_after_answer);
    CHECK_FALSE(warmslot::config::parse(head + "  save_after_answer: false\n", "test.yaml", env)
                    .cache.save_after_answer);
    CHECK_THROWS_AS(warmslot::config::parse(head + "  save_after_answer: 2\n", "test.yaml", env),
                    warmslot::config::config_error);
}

TEST_CASE("config: cache.conversation_files is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache.conversation_files);
    CHECK_FALSE(warmslot::config::parse(head + "  conversation_files: false\n", "test.yaml", env)
                    .cache.conversation_files);
    CHECK_THROWS_AS(warmslot::config::parse(head + "  conversation_files: maybe\n", "test.yaml", env),
                    warmslot::config::config_error);
}

TEST_CASE("config: cache.replica_files is a boolean, on by default") {
    const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const std::string head = "backends:\n  - name: a\n    url: http://127.0.0.1:9000\ncache:\n";
    CHECK(warmslot::config::parse(head + "  enabled: true\n", "test.yaml", env).cache.replica_files);
    CHECK_FALSE(warmslot::config::parse(head + "  replica_files: false\n", "test.yaml", env)
                    .cache.replica_files);
    try {
        warmslot::config::parse(head + "  replica_files: maybe\n", "test.yaml", env);
        FAIL("accepted a non-boolean");
    } catch (const warmslot::config::config_error& e) {
        CHECK(e.key_path() == "cache.replica_files");
        CHECK(e.line() == 5);
    }
}
