// The config as a whole: defaults, a file that sets every key, the top level and the document,
// the error's form, and reading a file. Each section has its tests in config_<section>_test.cpp.
#include "config/config.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using std::chrono::milliseconds;
using warmslot::test::bad_case;
using warmslot::test::contains;
using warmslot::test::fake_env;
using warmslot::test::one_backend;

namespace {

cfg::config parse(std::string_view yaml) { return warmslot::test::parse_with_fake_env(yaml); }

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

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
