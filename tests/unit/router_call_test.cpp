// Calls to one model of a llama-server in router mode (upstream/router_call.hpp), and the config
// entry of a router as one backend per model.
#include "upstream/router_call.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace up = warmslot::upstream;
namespace cfg = warmslot::config;

namespace {

cfg::backend member(std::string model) {
    cfg::backend b;
    b.name = "r." + model;
    b.router = "r";
    b.router_model = std::move(model);
    return b;
}

cfg::config parse(std::string_view yaml) {
    return cfg::parse(yaml, "test.yaml", [](const std::string& name) -> std::optional<std::string> {
        if (name == "HOME") return "/home/u";
        return std::nullopt;
    });
}

}  // namespace

TEST_CASE("router calls: which of warmslot's calls must not load a model") {
    struct row {
        bool get;
        const char* target;
        bool keeps;
    };
    const row rows[] = {
        {true, "/slots", true},
        {true, "/props", true},
        {true, "/metrics", true},
        {false, "/slots/0?action=save", true},
        {false, "/slots/1?action=erase", true},
        {false, "/slots/0?action=restore", false},
        {false, "/tokenize", false},
        {false, "/apply-template", false},
        {false, "/completion", false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.target);
        CHECK(up::keeps_unloaded(r.get, r.target) == r.keeps);
    }
}

TEST_CASE("router calls: the model in the query, percent-encoded, once") {
    const auto m = member("org/model:Q4 x");
    CHECK(up::router_target(m, "/slots", true) ==
          "/slots?model=org%2Fmodel%3AQ4%20x&autoload=false");
    CHECK(up::router_target(m, "/slots/0?action=save", true) ==
          "/slots/0?action=save&model=org%2Fmodel%3AQ4%20x&autoload=false");
    CHECK(up::router_target(m, "/props", false) == "/props?model=org%2Fmodel%3AQ4%20x");
    // A client's own choice stays.
    CHECK(up::router_target(m, "/props?model=other", false) == "/props?model=other");
    CHECK(up::router_target(m, "/slots?autoload=true", true) ==
          "/slots?autoload=true&model=org%2Fmodel%3AQ4%20x");
    // "models" is not "model".
    CHECK(up::router_target(m, "/x?models=1", false) == "/x?models=1&model=org%2Fmodel%3AQ4%20x");
    cfg::backend plain;
    CHECK(up::router_target(plain, "/slots", true) == "/slots");
}

TEST_CASE("router calls: the model first in a body, where a client's own name wins") {
    const auto m = member("tiny \"q\"");
    CHECK(up::router_model_field(m) == R"("model":"tiny \"q\"")");
    CHECK(up::router_body(m, "{}") == R"({"model":"tiny \"q\""})");
    CHECK(up::router_body(m, " { } ") == R"( {"model":"tiny \"q\"" } )");
    CHECK(up::router_body(m, "") == R"({"model":"tiny \"q\""})");
    const auto body = up::router_body(m, R"({"filename":"a.bin"})");
    CHECK(body == R"({"model":"tiny \"q\"","filename":"a.bin"})");
    CHECK(nlohmann::json::parse(body)["filename"] == "a.bin");
    // Duplicate names: the later one is what llama-server's JSON reader keeps.
    const auto named = up::router_body(m, R"({"model":"alias"})");
    CHECK(nlohmann::json::parse(named)["model"] == "alias");
    cfg::backend plain;
    CHECK(up::router_model_field(plain).empty());
    CHECK(up::router_body(plain, "{}") == "{}");
}

TEST_CASE("router calls: a model's state in the router's GET /models") {
    const std::string list = R"({"object":"list","data":[
        {"id":"a","status":{"value":"loaded","args":[]}},
        {"id":"b","status":{"value":"unloaded","failed":true,"exit_code":1}},
        {"id":"c"},
        {"id":"d","status":{"value":7}}]})";
    CHECK(up::read_router_state(list, "a") == "loaded");
    CHECK(up::read_router_state(list, "b") == "unloaded");
    CHECK(up::read_router_state(list, "c") == "");
    CHECK(up::read_router_state(list, "d") == "");
    CHECK(up::read_router_state(list, "e") == "");  // not listed
    CHECK_FALSE(up::read_router_state("not json", "a"));
    CHECK_FALSE(up::read_router_state(R"({"data":{}})", "a"));
    CHECK_FALSE(up::read_router_state(R"([1,2])", "a"));
}

TEST_CASE("config: a router entry is one backend per model") {
    const auto c = parse(
        "backends:\n  - name: gpu\n    url: http://127.0.0.1:8080\n"
        "    router: true\n    models: [tiny-llama, org/m:Q4]\n"
        "    slot_save_path: /var/slots\n  - name: other\n    url: http://h:2\n");
    REQUIRE(c.backends.size() == 3);
    CHECK(c.backends[0].name == "gpu.tiny-llama");
    CHECK(c.backends[0].router == "gpu");
    CHECK(c.backends[0].router_model == "tiny-llama");
    CHECK(c.backends[0].models == std::vector<std::string>{"tiny-llama"});
    CHECK(c.backends[0].slot_save_path == "/var/slots");
    CHECK(c.backends[0].port == 8080);
    CHECK(c.backends[1].name == "gpu.org_m_Q4");
    CHECK(c.backends[1].router_model == "org/m:Q4");
    CHECK(c.backends[1].url == c.backends[0].url);
    CHECK(c.backends[0].min_residency == std::chrono::seconds(30));
    CHECK(c.backends[2].router.empty());
    CHECK(c.backends[2].router_model.empty());
    const auto quick = parse(
        "backends:\n  - {name: r, url: 'http://h:1', router: true, models: [x],"
        " min_residency: 0s}\n");
    CHECK(quick.backends[0].min_residency.count() == 0);
    const auto off =
        parse("backends:\n  - {name: a, url: 'http://h:1', router: false, models: [x]}\n");
    REQUIRE(off.backends.size() == 1);
    CHECK(off.backends[0].router.empty());
}

TEST_CASE("config: a router names its models and is a url") {
    using warmslot::test::bad_case;
    const bad_case cases[] = {
        {"backends:\n  - name: r\n    url: http://h:1\n    router: true\n", "backends[0].models", 4,
         "is required for a router"},
        {"backends:\n  - name: r\n    command: [llama-server]\n    router: true\n    models: [a]\n",
         "backends[0].router", 4, "only applies to a url backend"},
        {"backends:\n  - name: r\n    url: http://h:1\n    min_residency: 5s\n",
         "backends[0].min_residency", 4, "only applies to a router (router: true)"},
        {"backends:\n  - name: r\n    url: http://h:1\n    router: yes please\n    models: [a]\n",
         "backends[0].router", 4, ""},
        {"backends:\n  - name: r.a\n    url: http://h:2\n  - name: r\n    url: http://h:1\n"
         "    router: true\n    models: [a]\n",
         "backends[1].name", 4, "duplicate backend name \"r.a\" (also backends[0])"},
    };
    for (const auto& c : cases)
        warmslot::test::check_rejected(c, [](std::string_view y) { parse(y); });
}
