// Command backends (warmslot starts llama-server itself) and cache.dir.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using std::chrono::milliseconds;

namespace {

using vars = std::map<std::string, std::string>;

cfg::env_lookup env_of(vars v) {
    return [v = std::move(v)](const std::string& name) -> std::optional<std::string> {
        const auto it = v.find(name);
        if (it == v.end()) return std::nullopt;
        return it->second;
    };
}

const vars home_only{{"HOME", "/home/u"}};

cfg::config parse(std::string_view yaml, const vars& env = home_only) {
    return cfg::parse(yaml, "test.yaml", env_of(env));
}

using warmslot::test::bad_case;

void check_rejected(const bad_case& c) {
    warmslot::test::check_rejected(c, [](std::string_view y) { parse(y); });
}

}  // namespace

TEST_CASE("config: a command backend gets supervision defaults and a slot directory") {
    const cfg::config c = parse(
        "backends:\n"
        "  - name: gpu0\n"
        "    command: [/opt/llama/llama-server, -m, /models/q.gguf, -np, \"4\"]\n"
        "  - name: remote\n"
        "    url: http://10.0.0.2:8081\n");
    REQUIRE(c.backends.size() == 2);
    const cfg::backend& b = c.backends[0];
    CHECK(b.supervised());
    CHECK(b.command ==
          std::vector<std::string>{"/opt/llama/llama-server", "-m", "/models/q.gguf", "-np", "4"});
    CHECK(b.url.empty());
    CHECK(b.host == "127.0.0.1");
    CHECK(b.port == 0);
    CHECK(b.start == cfg::start_mode::always);
    CHECK(b.idle_stop == milliseconds{0});
    CHECK(b.start_timeout == milliseconds{120'000});
    CHECK(b.restart_backoff_max == milliseconds{30'000});
    CHECK(b.slot_save_path == "/home/u/.cache/warmslot/state/slots/gpu0");
    CHECK_FALSE(c.backends[1].supervised());
    CHECK(c.backends[1].slot_save_path.empty());  // url backends get no default
    CHECK(c.cache.dir == "/home/u/.cache/warmslot/state");
}

TEST_CASE("config: every supervision key set") {
    const cfg::config c = parse(
        "backends:\n"
        "  - name: a\n"
        "    command:\n"
        "      - llama-server\n"
        "      - --model\n"
        "      - /m/x y.gguf\n"
        "    start: on_demand\n"
        "    idle_stop: 15m\n"
        "    start_timeout: 5m\n"
        "    restart_backoff_max: 1m\n"
        "    slot_save_path: /srv/slots/a\n"
        "cache:\n"
        "  dir: /var/lib/ws/\n");
    const cfg::backend& b = c.backends[0];
    CHECK(b.command == std::vector<std::string>{"llama-server", "--model", "/m/x y.gguf"});
    CHECK(b.start == cfg::start_mode::on_demand);
    CHECK(b.idle_stop == milliseconds{900'000});
    CHECK(b.start_timeout == milliseconds{300'000});
    CHECK(b.restart_backoff_max == milliseconds{60'000});
    CHECK(b.slot_save_path == "/srv/slots/a");
    CHECK(c.cache.dir == "/var/lib/ws");
    CHECK(parse("backends:\n  - {name: a, command: [s], idle_stop: 0s}\n").backends[0].idle_stop ==
          milliseconds{0});
}

TEST_CASE("config: env of a command backend, in file order, ${NAME} from the environment") {
    const cfg::config c = parse(
        "backends:\n"
        "  - name: a\n"
        "    command: [llama-server]\n"
        "    env:\n"
        "      CUDA_VISIBLE_DEVICES: \"1\"\n"
        "      GGML_CUDA_NO_PINNED: 1\n"
        "      HF_TOKEN: ${HF_TOKEN}\n"
        "      EMPTY: \"\"\n",
        {{"HOME", "/home/u"}, {"HF_TOKEN", "hf_secret"}});
    using kv = std::pair<std::string, std::string>;
    CHECK(c.backends[0].env == std::vector<kv>{{"CUDA_VISIBLE_DEVICES", "1"},
                                               {"GGML_CUDA_NO_PINNED", "1"},
                                               {"HF_TOKEN", "hf_secret"},
                                               {"EMPTY", ""}});
    CHECK(parse("backends:\n  - {name: a, command: [s], env: }\n").backends[0].env.empty());
    CHECK(parse("backends:\n  - {name: a, command: [s]}\n").backends[0].env.empty());
}

TEST_CASE("config: cache.dir defaults from the environment") {
    const std::string yaml = "backends:\n  - {name: b1, command: [llama-server]}\n";
    struct env_case {
        vars env;
        std::string dir;
    };
    const env_case cases[] = {
        {{{"STATE_DIRECTORY", "/var/lib/warmslot"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}},
         "/var/lib/warmslot"},
        {{{"STATE_DIRECTORY", "/var/lib/warmslot:/var/lib/other"}}, "/var/lib/warmslot"},
        {{{"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}}, "/x/warmslot/state"},
        {{{"XDG_CACHE_HOME", "relative"}, {"HOME", "/h"}}, "/h/.cache/warmslot/state"},
        {{{"STATE_DIRECTORY", ""}, {"HOME", "/h"}}, "/h/.cache/warmslot/state"},
        {{}, ""},
    };
    for (const env_case& ec : cases) {
        CAPTURE(ec.dir);
        const cfg::config c = parse("backends:\n  - {name: u, url: http://h:1}\n", ec.env);
        CHECK(c.cache.dir == ec.dir);
        if (!ec.dir.empty())
            CHECK(parse(yaml, ec.env).backends[0].slot_save_path == ec.dir + "/slots/b1");
    }
    CHECK(parse(yaml + "cache:\n  enabled: true\n", {{"HOME", "/h"}}).cache.dir ==
          "/h/.cache/warmslot/state");
    try {
        parse(yaml, {});
        FAIL("a command backend without any state directory was accepted");
    } catch (const cfg::config_error& e) {
        CHECK(e.key_path() == "backends[0].slot_save_path");
        CHECK(e.line() == 2);
        CHECK(e.problem().find("set cache.dir or slot_save_path") != std::string::npos);
    }
    CHECK(parse(yaml + "cache:\n  dir: /d\n", {}).backends[0].slot_save_path == "/d/slots/b1");
}

TEST_CASE("config: command backends are validated") {
    const std::string head = "backends:\n  - name: a\n";
    const bad_case cases[] = {
        {head + "    url: http://h:1\n    command: [llama-server]\n", "backends[0].command", 4,
         "either url (a running llama-server) or command"},
        {head + "    command: [llama-server]\n    url: http://h:1\n", "backends[0].command", 3,
         "not both"},
        {head + "    models: [m]\n", "backends[0].url", 2, "is required, or command"},
        {head + "    command: llama-server -m x.gguf\n", "backends[0].command", 3,
         "expected a non-empty list of arguments, program first (no shell is used), found a "
         "scalar"},
        {head + "    command: []\n", "backends[0].command", 3, "found an empty list"},
        {head + "    command:\n", "backends[0].command", 3, "found no value"},
        {head + "    command: [\"llama-server -m x.gguf\"]\n", "backends[0].command[0]", 3,
         "looks like a whole command line"},
        {head + "    command: [\"\"]\n", "backends[0].command[0]", 3, "must not be empty"},
        {head + "    command: [s, [x]]\n", "backends[0].command[1]", 3, "expected an argument"},
        {head + "    command:\n      - s\n      - --port\n      - \"8081\"\n",
         "backends[0].command[1]", 5, "--port is set by warmslot"},
        {head + "    command: [s, --host=0.0.0.0]\n", "backends[0].command[1]", 3,
         "--host is set by warmslot"},
        {head + "    command: [s, --slot-save-path, /x]\n", "backends[0].command[1]", 3,
         "--slot-save-path is set by warmslot"},
        {head + "    command: [s]\n    start: lazy\n", "backends[0].start", 4,
         "unknown start \"lazy\"; expected always or on_demand"},
        {head + "    command: [s]\n    idle_stop: 10\n", "backends[0].idle_stop", 4,
         "invalid duration"},
        {head + "    command: [s]\n    idle_stop: -1s\n", "backends[0].idle_stop", 4, ""},
        {head + "    command: [s]\n    start_timeout: 0s\n", "backends[0].start_timeout", 4,
         "must be greater than 0"},
        {head + "    command: [s]\n    restart_backoff_max: 25h\n",
         "backends[0].restart_backoff_max", 4, "at most 24h"},
        {head + "    command: [s]\n    ctx_checkpoints: 0\n", "backends[0].ctx_checkpoints", 4,
         "only applies to a url backend"},
        {head + "    url: http://h:1\n    ctx_checkpoints: -1\n", "backends[0].ctx_checkpoints", 4,
         ""},
        {head + "    command: [s]\n    restart: always\n", "backends[0].restart", 4,
         "unknown key; expected one of: name, url, command, models, slot_save_path, "
         "ctx_checkpoints, sleep_idle, router, min_residency, start, idle_stop, start_timeout, "
         "restart_backoff_max, env"},
        {head + "    command: [s]\n    sleep_idle: 300s\n", "backends[0].sleep_idle", 4,
         "only applies to a url backend"},
        {head + "    url: http://h:1\n    sleep_idle: 5\n", "backends[0].sleep_idle", 4, ""},
        {head + "    url: http://h:1\n    env: {CUDA_VISIBLE_DEVICES: \"0\"}\n", "backends[0].env",
         4, "only applies to a backend with command"},
        {head + "    command: [s]\n    env: [A=1]\n", "backends[0].env", 4,
         "expected a map of variable names to values, found a list"},
        {head + "    command: [s]\n    env:\n      CUDA_VISIBLE_DEVICES: [0]\n",
         "backends[0].env.CUDA_VISIBLE_DEVICES", 5, "expected a string, found a list"},
        {head + "    command: [s]\n    env:\n      1GPU: x\n", "backends[0].env.1GPU", 5,
         "a variable name is 1 to 128 characters"},
        {head + "    command: [s]\n    env:\n      A-B: x\n", "backends[0].env.A-B", 5,
         "a variable name"},
        {head + "    command: [s]\n    env:\n      Ab: x\n      AB: y\n", "backends[0].env.AB", 6,
         "set twice"},
        {head + "    command: [s]\n    env:\n      HF_TOKEN: ${UNSET_TOKEN}\n",
         "backends[0].env.HF_TOKEN", 5, "environment variable UNSET_TOKEN is not set"},
        {head + "    command: [s]\n    env:\n      HF_TOKEN: x${HOME}\n",
         "backends[0].env.HF_TOKEN", 5, "malformed environment reference"},
        {head + "    url: http://h:1\n    start: on_demand\n", "backends[0].start", 4,
         "only applies to a backend with command"},
        {head + "    url: http://h:1\n    idle_stop: 5m\n", "backends[0].idle_stop", 4,
         "only applies to a backend with command"},
        {head + "    url: http://h:1\n    restart_backoff_max: 5m\n",
         "backends[0].restart_backoff_max", 4, "only applies"},
        {head + "    command: [s]\ncache:\n  dir: relative/dir\n", "cache.dir", 5,
         "must be an absolute directory path"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}

TEST_CASE("config: ctx_checkpoints of a url backend; a command backend's comes from its argv") {
    const cfg::config c = parse(
        "backends:\n  - name: a\n    url: http://h:1\n"
        "    ctx_checkpoints: 0\n  - name: b\n    url: http://h:2\n");
    REQUIRE(c.backends.size() == 2);
    CHECK(c.backends[0].ctx_checkpoints == 0L);
    CHECK_FALSE(c.backends[1].ctx_checkpoints);
    CHECK_FALSE(c.backends[0].env_value("PATH"));  // a url backend's environment is not ours
}

TEST_CASE("config: sleep_idle of a url backend; 0s and unset mean it never sleeps") {
    const cfg::config c = parse(
        "backends:\n  - name: a\n    url: http://h:1\n"
        "    sleep_idle: 5m\n  - name: b\n    url: http://h:2\n"
        "  - name: c\n    url: http://h:3\n    sleep_idle: 0s\n");
    REQUIRE(c.backends.size() == 3);
    CHECK(c.backends[0].sleep_idle == std::chrono::minutes(5));
    CHECK(c.backends[1].sleep_idle.count() == 0);
    CHECK(c.backends[2].sleep_idle.count() == 0);
}

TEST_CASE("config: backend names are safe, unique directory names") {
    const bad_case cases[] = {
        {"backends:\n  - {name: ., command: [s]}\n", "backends[0].name", 2, "not \".\" or \"..\""},
        {"backends:\n  - {name: .., command: [s]}\n", "backends[0].name", 2, "not \".\""},
        {"backends:\n  - {name: a/b, command: [s]}\n", "backends[0].name", 2, "1 to 64 characters"},
        {"backends:\n  - {name: GPU, command: [s]}\n  - {name: gpu, url: http://h:1}\n",
         "backends[1].name", 3, "differs from backends[0] only in case"},
        {"backends:\n  - {name: a, command: [s]}\n  - {name: a, command: [t]}\n",
         "backends[1].name", 3, "duplicate backend name \"a\""},
    };
    for (const bad_case& c : cases) check_rejected(c);
    CHECK(parse("backends:\n  - {name: .hidden-1, command: [s]}\n").backends[0].slot_save_path ==
          "/home/u/.cache/warmslot/state/slots/.hidden-1");
}

TEST_CASE("cache.isolation: shared by default; tenant refuses what would undo it") {
    CHECK_FALSE(parse("backends:\n  - {name: a, url: http://h:1}\n").cache.isolated());
    const auto c = parse(
        "backends:\n  - {name: a, command: [llama-server, --cache-ram, '0']}\n"
        "cache:\n  isolation: tenant\n");
    CHECK(c.cache.isolated());
    CHECK(parse("backends:\n  - {name: a, command: [s, --cache-ram=0]}\n"
                "cache:\n  isolation: shared\n  shared_across_tenants: true\n")
              .cache.shared_across_tenants);
    const warmslot::test::bad_case bad[] = {
        {"backends:\n  - {name: a, url: http://h:1}\ncache:\n  isolation: strict\n",
         "cache.isolation", 4, "expected shared or tenant, found \"strict\""},
        {"backends:\n  - {name: a, url: http://h:1}\n"
         "cache:\n  shared_across_tenants: true\n  isolation: tenant\n",
         "cache.isolation", 5, "contradict"},
        {"backends:\n  - {name: a, command: [llama-server, --cache-ram, '4096']}\n"
         "cache:\n  isolation: tenant\n",
         "cache.isolation", 4, "backend a runs llama-server with --cache-ram 4096"},
        {"backends:\n  - {name: a, command: [llama-server, -cram, '-1']}\n"
         "cache:\n  isolation: tenant\n",
         "cache.isolation", 4, "--cache-ram -1"},
        {"backends:\n  - {name: a, command: [llama-server, --cache-ram=8192]}\n"
         "cache:\n  isolation: tenant\n",
         "cache.isolation", 4, "--cache-ram 8192"},
    };
    for (const auto& b : bad) check_rejected(b);
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
    for (const bad_case& c : cases) warmslot::test::check_rejected_keeping_secrets(c);
}
