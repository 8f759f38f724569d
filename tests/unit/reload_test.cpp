// What a config reload keeps, retires and adds (config/reload).
#include "config/reload.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <thread>

#include "config/source.hpp"

namespace warmslot::config {
namespace {

backend make(std::string name, std::string url, std::vector<std::string> models = {}) {
    backend b;
    b.name = std::move(name);
    b.url = std::move(url);
    b.models = std::move(models);
    return b;
}

config with(std::vector<backend> backends) {
    config c;
    c.backends = std::move(backends);
    return c;
}

std::vector<std::string> names(const config& c) {
    std::vector<std::string> out;
    for (const auto& b : c.backends) out.push_back(b.name + (b.retired ? "-" : ""));
    return out;
}

TEST_CASE("reload: indexes are stable, removed backends retire, new ones are appended") {
    struct row {
        const char* what;
        std::vector<backend> running;
        std::vector<backend> parsed;
        std::vector<std::string> expected;  // "-" marks retired
        std::vector<int> retired;
        std::vector<int> added;
    };
    const auto a = make("a", "http://127.0.0.1:1");
    const auto b = make("b", "http://127.0.0.1:2");
    const auto c = make("c", "http://127.0.0.1:3");
    auto a_moved = make("a", "http://127.0.0.1:9");
    auto b_gone = b;
    b_gone.retired = true;
    const std::vector<row> rows = {
        {"unchanged", {a, b}, {a, b}, {"a", "b"}, {}, {}},
        {"reordered in the file", {a, b}, {b, a}, {"a", "b"}, {}, {}},
        {"one removed", {a, b}, {a}, {"a", "b-"}, {1}, {}},
        {"one added", {a}, {a, c}, {"a", "c"}, {}, {1}},
        {"url changed: a new backend", {a, b}, {a_moved, b}, {"a-", "b", "a"}, {0}, {2}},
        {"a retired one comes back", {a, b_gone}, {a, b}, {"a", "b"}, {}, {1}},
        {"still retired", {a, b_gone}, {a}, {"a", "b-"}, {}, {}},
        {"everything replaced", {a}, {c}, {"a-", "c"}, {0}, {1}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        const auto plan = plan_reload(with(r.running), with(r.parsed));
        CHECK(names(plan.next) == r.expected);
        CHECK(plan.retired == r.retired);
        CHECK(plan.added == r.added);
        CHECK(plan.changes.size() >= r.retired.size() + r.added.size());
    }
}

TEST_CASE("reload: a kept backend takes its new settings") {
    const auto plan = plan_reload(with({make("a", "http://127.0.0.1:1", {"x"})}),
                                  with({make("a", "http://127.0.0.1:1", {"x", "y"})}));
    REQUIRE(plan.next.backends.size() == 1);
    CHECK(plan.next.backends[0].models == std::vector<std::string>{"x", "y"});
    CHECK(plan.changes.size() == 1);
}

TEST_CASE("reload: the listen address waits for a restart, other settings apply") {
    auto running = with({make("a", "http://127.0.0.1:1")});
    auto parsed = running;
    parsed.listen.port = 9999;
    parsed.api_keys = {"sk-new"};
    parsed.timeouts.stream_idle = millis{1234};
    const auto plan = plan_reload(running, parsed);
    CHECK(plan.next.listen.port == running.listen.port);
    CHECK(plan.next.api_keys == std::vector<std::string>{"sk-new"});
    CHECK(plan.next.timeouts.stream_idle == millis{1234});
    REQUIRE(plan.changes.size() == 1);
    CHECK(plan.changes[0].find("next start") != std::string::npos);
}

TEST_CASE("reload: cache.isolation waits for a restart") {
    auto running = with({make("a", "http://127.0.0.1:1")});
    auto parsed = running;
    parsed.cache.isolation = isolation_mode::tenant;
    parsed.cache.min_prefix_tokens = 4096;
    auto plan = plan_reload(running, parsed);
    CHECK_FALSE(plan.next.cache.isolated());
    CHECK(plan.next.cache.min_prefix_tokens == 4096);
    REQUIRE(plan.changes.size() == 1);
    CHECK(plan.changes[0] == "cache.isolation: tenant takes effect at the next start");
    // Turned off: the running isolation holds, and with it no sharing across tenants.
    running.cache.isolation = isolation_mode::tenant;
    parsed.cache.isolation = isolation_mode::shared;
    parsed.cache.shared_across_tenants = true;
    plan = plan_reload(running, parsed);
    CHECK(plan.next.cache.isolated());
    CHECK_FALSE(plan.next.cache.shared_across_tenants);
}

TEST_CASE("reload: a supervised backend is its command line and keeps its running address") {
    backend s;
    s.name = "s";
    s.command = {"llama-server", "-m", "a.gguf"};
    auto running = with({s});
    running.backends[0].host = "127.0.0.1";
    running.backends[0].port = 41000;
    running.backends[0].url = "http://127.0.0.1:41000";
    auto same = with({s});
    same.backends[0].idle_stop = millis{5000};
    auto plan = plan_reload(running, same);
    REQUIRE(plan.next.backends.size() == 1);
    CHECK(plan.next.backends[0].port == 41000);
    CHECK(plan.next.backends[0].idle_stop == millis{5000});
    CHECK(plan.changes.empty());

    auto other = with({s});
    other.backends[0].command.back() = "b.gguf";
    plan = plan_reload(running, other);
    REQUIRE(plan.next.backends.size() == 2);
    CHECK(plan.next.backends[0].retired);
    CHECK(plan.next.backends[1].port == 0);  // a new process: its port is picked at start
    CHECK(plan.added == std::vector<int>{1});

    // Other variables make another process too; the change line never shows their values.
    auto env = with({s});
    env.backends[0].env = {{"HF_TOKEN", "hf_secret_value"}};
    plan = plan_reload(running, env);
    REQUIRE(plan.next.backends.size() == 2);
    CHECK(plan.next.backends[0].retired);
    for (const auto& line : plan.changes) CHECK(line.find("hf_secret_value") == std::string::npos);
}

TEST_CASE("reload: active backends leave out retired ones") {
    auto c = with({make("a", "http://127.0.0.1:1"), make("b", "http://127.0.0.1:2")});
    CHECK(active_backends(c) == 2);
    c.backends[0].retired = true;
    CHECK(active_backends(c) == 1);
}

}  // namespace
}  // namespace warmslot::config

namespace warmslot {

TEST_CASE("source: each thread sees what was published last; held snapshots stay as they were") {
    config::config a;
    a.listen.port = 1;
    config::source src(a);
    config::config other_initial;
    other_initial.listen.port = 9;
    config::source other(other_initial);  // a second source never shows the first one's snapshots

    const auto held = src.current();
    CHECK(held->listen.port == 1);
    CHECK(other.current()->listen.port == 9);
    CHECK(src.current().get() == held.get());  // unchanged: the same snapshot

    for (std::uint16_t port = 2; port <= 4; ++port) {
        config::config next;
        next.listen.port = port;
        src.publish(std::make_shared<const config::config>(next));
        CHECK(src.current()->listen.port == port);
        std::uint16_t seen = 0;
        std::thread([&] { seen = src.current()->listen.port; }).join();
        CHECK(seen == port);
        CHECK(other.current()->listen.port == 9);
    }
    CHECK(held->listen.port == 1);  // what a request took is not changed under it
}

}  // namespace warmslot
