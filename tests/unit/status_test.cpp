// The dashboard's pure parts: the activity ring and time series, slot previews, the status JSON
// built from registry views and disk listings, the terminal tables, and the built-in files.
#include "status/status.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "status/assets.hpp"
#include "status/table.hpp"

namespace status = warmslot::status;
namespace routing = warmslot::routing;
namespace cfg = warmslot::config;
namespace cache = warmslot::cache;
using nlohmann::json;

namespace {

status::request_record request(std::int64_t at_ms, std::string route, std::optional<long> cached,
                               std::optional<long> processed, double saved_total = 0) {
    status::request_record r;
    r.at_ms = at_ms;
    r.id = std::to_string(at_ms);
    r.method = "POST";
    r.path = "/v1/chat/completions";
    r.status = 200;
    r.route = std::move(route);
    r.cached = cached;
    r.processed = processed;
    r.prompt_ms = 100;
    r.saved_seconds = saved_total;
    return r;
}

cfg::config two_backends() {
    cfg::config c;
    c.backends.resize(2);
    c.backends[0].name = "a";
    c.backends[0].url = "http://127.0.0.1:1";
    c.backends[0].slot_save_path = "/srv/slots";
    c.backends[1].name = "b";
    c.backends[1].url = "http://127.0.0.1:2";
    return c;
}

}  // namespace

TEST_CASE("route groups: the first word of X-Warmslot-Route") {
    CHECK(status::group_of("hit") == status::route_group::hit);
    CHECK(status::group_of("hit; waited_ms=3") == status::route_group::hit);
    CHECK(status::group_of("miss; reason=evicted") == status::route_group::miss);
    CHECK(status::group_of("scratch") == status::route_group::scratch);
    CHECK(status::group_of("") == status::route_group::pass_through);
    CHECK(status::group_of("pass_through") == status::route_group::pass_through);
    CHECK(status::group_of("failover") == status::route_group::other);
    CHECK(status::name(status::route_group::other) == "failover");
}

TEST_CASE("activity: buckets of 5 s sum tokens, routes and saved seconds; the ring is bounded") {
    status::activity a;
    const std::int64_t t0 = 1'000'000'000'000;  // a multiple of 5000
    a.record(request(t0 + 100, "miss; reason=new_prefix", 0, 7000, 0));
    a.record(request(t0 + 4900, "hit", 6990, 10, 7.0));
    a.record(request(t0 + 5000, "hit", 6990, 10, 13.5));
    auto failed = request(t0 + 6000, "", std::nullopt, std::nullopt, 99);
    failed.disk = "restored 6990 tokens";
    a.record(failed);
    const auto v = a.view(t0 + 7000);
    REQUIRE(v.series.size() == 2);
    CHECK(v.series[0].start_ms == t0);
    CHECK(v.series[0].requests == 2);
    CHECK(v.series[0].processed == 7010);
    CHECK(v.series[0].reused == 6990);
    CHECK(v.series[0].saved_seconds == doctest::Approx(7.0));
    CHECK(v.series[0].routes[0] == 1);  // hit
    CHECK(v.series[0].routes[1] == 1);  // miss
    CHECK(v.series[1].requests == 2);
    CHECK(v.series[1].saved_seconds == doctest::Approx(6.5));  // increase of the running total
    CHECK(v.series[1].timed == 1);      // the request without timings has no prefill time
    CHECK(v.series[1].routes[3] == 0);  // nor a route: it never reached a backend
    CHECK(v.requests.size() == 4);
    CHECK(v.requests[3].saved_seconds == 0);
    CHECK(v.disk.restores == 1);

    // An hour later the old buckets are gone; the ring keeps max_requests.
    for (std::size_t i = 0; i < status::activity::max_requests + 10; ++i) {
        a.record(request(t0 + status::activity::window_ms + 10'000 + static_cast<std::int64_t>(i),
                         "hit", 1, 1, 20));
    }
    const auto later = a.view(t0 + status::activity::window_ms + 20'000);
    CHECK(later.requests.size() == status::activity::max_requests);
    REQUIRE(later.series.size() == 1);
    CHECK(later.series[0].requests == status::activity::max_requests + 10);
}

TEST_CASE("previews: one per slot, replaced, bounded") {
    status::activity a;
    a.set_preview("a", 0, {"first", false, 1, ""});
    a.set_preview("a", 0, {"second", true, 2, ""});
    a.set_preview("a", 1, {"other", false, 3, ""});
    auto v = a.view(10);
    REQUIRE(v.previews.size() == 2);
    CHECK(v.previews.at({"a", 0}).text == "second");
    CHECK(v.previews.at({"a", 0}).label);
    for (int i = 0; i < static_cast<int>(status::activity::max_previews) + 5; ++i) {
        a.set_preview("b", i, {"x", false, 100 + i, ""});
    }
    v = a.view(10);
    CHECK(v.previews.size() == status::activity::max_previews);
    CHECK(v.previews.count({"a", 0}) == 0);  // the oldest went first
}

TEST_CASE("preview_text: whitespace folded, cut on characters, not bytes") {
    CHECK(status::preview_text("  Hello\n\n  world\t", 60) == "Hello world");
    CHECK(status::preview_text("abcdef", 3) == "abc…");
    CHECK(status::preview_text("abc   ", 3) == "abc");
    CHECK(status::preview_text("日本語の文書です", 3) == "日本語…");
    CHECK(status::preview_text("a\x01"
                               "b",
                               10) == "ab");
    CHECK(status::preview_text("ab\xE6\x97", 10) == "ab");  // a cut sequence at the end
    CHECK(status::preview_text("", 10).empty());
}

TEST_CASE("body_preview: the longest message before the final turn, else the prompt") {
    const json doc = {
        {"messages",
         {{{"role", "system"}, {"content", "You answer questions."}},
          {{"role", "user"}, {"content", "Manual of the XR-7 pump, chapter one"}},
          {{"role", "user"}, {"content", "What is the longest question of all time?"}}}}};
    CHECK(status::body_preview(doc) == "Manual of the XR-7 pump, chapter one");
    const json parts = {
        {"messages",
         {{{"role", "system"},
           {"content",
            {{{"type", "text"}, {"text", "Part one"}}, {{"type", "text"}, {"text", "two"}}}}},
          {{"role", "user"}, {"content", "q"}}}}};
    CHECK(status::body_preview(parts) == "Part one two");
    CHECK(status::body_preview(json{{"messages", {{{"role", "user"}, {"content", "only one"}}}}}) ==
          "only one");
    CHECK(status::body_preview(json{{"prompt", "Once upon a time"}}) == "Once upon a time");
    CHECK(status::body_preview(json{{"prompt", {1, 2, 3}}}).empty());
    CHECK(status::body_preview(json()).empty());
    CHECK(status::body_preview(json{{"messages",
                                     {{{"role", "system"}, {"content", std::string(500, 'x')}},
                                      {{"role", "user"}, {"content", "q"}}}}})
              .size() == status::preview_chars + std::string("…").size());
}

TEST_CASE(
    "build_status: backends, slots with previews, pass-through reasons, disk, series, requests") {
    auto c = two_backends();
    status::status_input in;
    in.cfg = &c;
    in.now = routing::clock::now();
    in.now_ms = 2'000'000;
    in.views.resize(2);
    in.views[0].name = "a";
    in.views[0].slots.resize(2);
    in.views[0].slots[0].id = 0;
    in.views[0].slots[0].held_tokens = 7000;
    in.views[0].slots[0].held.push_back({});
    in.views[0].slots[0].last_use = in.now - std::chrono::seconds(30);
    in.views[0].slots[1].id = 1;
    in.views[0].slots[1].busy = true;
    in.views[1].name = "b";
    in.views[1].pinning = false;
    routing::backend_info info;
    info.total_slots = 2;
    info.model_path = "/m.gguf";
    info.identity = "m.gguf|b1|2|16384";
    in.infos = {info, info};
    in.totals.prompt_tokens_reused = 6990;
    in.totals.requests_by_route[0] = 1;
    in.activity.previews[{"a", 0}] = {"Manual of the XR-7 pump", false, 1, ""};
    in.activity.previews[{"a", 1}] = {"held before the restart", false, 1, ""};
    in.activity.requests.push_back(request(1000, "miss; reason=new_prefix", 0, 7000));
    in.activity.requests.push_back(request(2000, "hit", 6990, 10));
    in.activity.series.push_back(status::bucket{.start_ms = 0, .requests = 2});
    cache::snapshot f;
    f.key = "ab";
    f.file = "ws-ab.bin";
    f.tokens = 7000;
    f.bytes = 7'800'000;
    f.hits = 1;
    f.prefill_seconds = 6;
    in.disk.push_back({"/srv/slots", {"a"}, 1'000'000'000, {f}});

    const auto s = status::build_status(in);
    REQUIRE(s["backends"].size() == 2);
    const auto& a = s["backends"][0];
    CHECK(a["routing"] == true);
    CHECK(a["pass_through_reason"] == "");
    CHECK(a["model"] == "/m.gguf");
    CHECK(a["slots"][0]["preview"] == "Manual of the XR-7 pump");
    CHECK(a["slots"][0]["tokens"] == 7000);
    CHECK(a["slots"][0]["last_use_seconds_ago"].get<double>() == doctest::Approx(30).epsilon(0.05));
    CHECK(a["slots"][1]["state"] == "busy");
    CHECK(a["slots"][1]["preview"].is_null());  // believed empty: the old preview is not shown
    const auto& b = s["backends"][1];
    CHECK(b["routing"] == false);
    CHECK(b["pass_through_reason"].get<std::string>().find("-np N") != std::string::npos);
    CHECK(s["disk"]["dirs"][0]["used_bytes"] == 7'800'000);
    CHECK(s["disk"]["dirs"][0]["files"][0]["value_seconds"] == 12.0);
    CHECK(s["totals"]["requests_by_route"]["hit"] == 1);
    CHECK(s["series"]["points"][0]["prefill_ms"].is_null());
    CHECK(s["requests"][0]["route"] == "hit");  // newest first
    CHECK(s["requests"][1]["processed"] == 7000);

    c.dashboard.previews = false;
    CHECK(status::build_status(in)["backends"][0]["slots"][0]["preview"].is_null());
    c.routing.enabled = false;
    CHECK(status::pass_through_reason(c, in.views[0], info).find("routing.enabled") !=
          std::string::npos);
    CHECK(status::pass_through_reason(two_backends(), in.views[0], std::nullopt).find("not seen") !=
          std::string::npos);
}

TEST_CASE(
    "build_status: a tenant sees its own files without keys, and no other tenant's slot sizes") {
    auto c = two_backends();
    status::status_input in;
    in.cfg = &c;
    in.now = routing::clock::now();
    in.views.resize(1);
    in.views[0].slots.resize(2);
    in.views[0].slots[0].held_tokens = 9140;  // tenant a's document
    in.views[0].slots[0].owner = "a";
    in.views[0].slots[1].id = 1;
    in.views[0].slots[1].held_tokens = 300;
    in.views[0].slots[1].owner = "b";
    cache::snapshot of_a;
    of_a.key = "aaaa";
    of_a.file = "ws-aaaa.bin";
    of_a.bytes = 1000;
    of_a.tenant = "a";
    of_a.last_used = 2;  // listed first
    cache::snapshot of_b = of_a;
    of_b.last_used = 1;
    of_b.key = "bbbb";
    of_b.file = "ws-bbbb.bin";
    of_b.bytes = 500;
    of_b.tenant = "b";
    in.disk.push_back({"/srv/slots", {"a"}, 1'000'000, {of_a, of_b}});

    const std::string b = "b";
    in.tenant = &b;
    const auto seen = status::build_status(in);
    const auto& files = seen["disk"]["dirs"][0]["files"];
    REQUIRE(files.size() == 1);
    CHECK(files[0]["bytes"] == 500);
    CHECK(files[0]["key"].is_null());
    CHECK(files[0]["file"].is_null());
    CHECK(seen["disk"]["dirs"][0]["used_bytes"] == 500);
    CHECK(seen.dump().find("aaaa") == std::string::npos);
    CHECK(seen.dump().find("bbbb") == std::string::npos);
    CHECK(seen["backends"][0]["slots"][0]["tokens"].is_null());
    CHECK(seen["backends"][0]["slots"][1]["tokens"] == 300);

    in.tenant = nullptr;  // an admin: everything
    const auto all = status::build_status(in);
    CHECK(all["disk"]["dirs"][0]["files"].size() == 2);
    CHECK(all["disk"]["dirs"][0]["files"][0]["key"] == "aaaa");
    CHECK(all["backends"][0]["slots"][0]["tokens"] == 9140);
}

TEST_CASE("format_status: the tables `warmslot status` prints") {
    const json s = json::parse(R"({
      "now": 100000,
      "backends": [
        {"name": "a", "healthy": true, "routing": true, "total_slots": 2, "in_flight": 0,
         "model": "/m.gguf",
         "slots": [{"id": 0, "state": "idle", "tokens": 7000, "preview": "Manual",
                    "last_use_seconds_ago": 30.0},
                   {"id": 1, "state": "busy", "tokens": 0, "preview": null,
                    "now": {"doing": "priming", "done": 9216, "total": 24077, "seconds": 4.2}}]},
        {"name": "b", "healthy": false, "routing": false,
         "pass_through_reason": "start it with -np N", "slots": []}],
      "disk": {"restores": 1, "restore_failures": 0, "snapshots": 2,
               "dirs": [{"dir": "/srv", "used_bytes": 7800000, "budget_bytes": 1e9,
                         "files": [{"file": "ws-ab.bin", "tokens": 7000, "bytes": 7800000,
                                    "value_seconds": 12.0, "hits": 1, "last_used": 40}]}]},
      "totals": {"prompt_tokens_processed": 7010, "prompt_tokens_reused": 6990,
                 "prefill_seconds_saved": 6.5, "requests_by_route": {"hit": 1}},
      "requests": [{"id": "r1", "method": "POST", "path": "/v1/chat/completions",
                    "status": 200, "backend": "a", "slot": 0, "route": "hit",
                    "disk": "restored 6990 tokens", "cached": 6990, "processed": 10,
                    "ms": 12.3}]
    })");
    const auto text = status::format_status(s, 10);
    CAPTURE(text);
    CHECK(text.find("a        ok      on") != std::string::npos);
    CHECK(text.find("b: start it with -np N") != std::string::npos);
    CHECK(text.find("a/0   idle   7000    30s ago   -                      \"Manual\"") !=
          std::string::npos);
    CHECK(text.find("a/1   busy   0       -         priming 9216/24077 4s  -") !=
          std::string::npos);
    CHECK(text.find("/srv: 7.8 MB of 1.0 GB") != std::string::npos);
    CHECK(text.find("ws-ab.bin  7000    7.8 MB  12.0s") != std::string::npos);
    CHECK(text.find("6990 reused") != std::string::npos);
    CHECK(text.find("restored 6990 tokens") != std::string::npos);
    CHECK(status::format_status(s, 0).find("REQUEST") == std::string::npos);
    CHECK(status::format_status(json::object(), 5).find("BACKEND") != std::string::npos);
    CHECK(status::human_bytes(512) == "512 B");
    CHECK(status::human_ago(7200) == "2h");
}

TEST_CASE("assets: the page and its files are built in, with their types") {
    const auto page = status::find_asset("index.html");
    REQUIRE(page);
    CHECK(page->content_type == "text/html; charset=utf-8");
    CHECK(page->body.find("/warmslot/dashboard.js") != std::string_view::npos);
    REQUIRE(status::find_asset("dashboard.js"));
    CHECK(status::find_asset("dashboard.js")->content_type == "text/javascript; charset=utf-8");
    REQUIRE(status::find_asset("dashboard.css"));
    CHECK_FALSE(status::find_asset("../index.html"));
    CHECK_FALSE(status::find_asset(""));
}

TEST_CASE("format_status: swap groups, only when there are any") {
    const json s = json::parse(R"({
      "backends": [],
      "swaps": {"groups": [{"name": "gpu", "max_running": 1, "members": [
                  {"backend": "coder", "state": "draining", "waiting": 0, "home": true},
                  {"backend": "chat", "state": "stopped", "waiting": 3, "home": false}]},
                 {"name": "gpu1", "max_running": 2, "allow": [["a", "e"], ["b", "e"]], "members": [
                  {"backend": "a", "state": "running", "waiting": 0, "home": false}]}],
                "totals": {"swaps": 4, "failed_starts": 0, "drain_seconds": 1.25,
                           "save_seconds": 0.5, "stop_seconds": 0.75, "start_seconds": 6.0,
                           "restore_seconds": 2.5}}
    })");
    const auto text = status::format_status(s, 0);
    CAPTURE(text);
    CHECK(text.find("SWAP GROUP  PLACES     MEMBERS") != std::string::npos);
    CHECK(text.find("gpu         1          coder (draining, home), chat (stopped, 3 waiting)") !=
          std::string::npos);
    CHECK(text.find("gpu1        a+e | b+e  a (running)") != std::string::npos);
    CHECK(text.find("swaps: 4 (drain 1.2 s, save 0.5 s, stop 0.8 s, start 6.0 s, restore 2.5 s); "
                    "failed starts: 0") != std::string::npos);
    CHECK(status::format_status(json::parse(R"({"backends": []})"), 0).find("SWAP GROUP") ==
          std::string::npos);
}

TEST_CASE(
    "build_status: what a slot does now, and how far; another tenant's slot shows only what") {
    auto c = two_backends();
    status::status_input in;
    in.cfg = &c;
    in.now = routing::clock::now();
    in.views.resize(1);
    in.views[0].slots.resize(3);
    auto& priming = in.views[0].slots[0];
    priming.work = routing::slot_work::priming;
    priming.work_done = 9216;
    priming.work_total = 24077;
    priming.work_since = in.now - std::chrono::seconds(4);
    auto& saving = in.views[0].slots[1];
    saving.id = 1;
    saving.work = routing::slot_work::saving;
    saving.work_total = 24077;
    saving.work_since = in.now;
    saving.owner = "a";
    in.views[0].slots[2].id = 2;
    const auto s = status::build_status(in);
    const auto& slots = s["backends"][0]["slots"];
    CHECK(slots[0]["now"]["doing"] == "priming");
    CHECK(slots[0]["now"]["done"] == 9216);
    CHECK(slots[0]["now"]["total"] == 24077);
    CHECK(slots[0]["now"]["seconds"].get<double>() >= 4.0);
    CHECK(slots[1]["now"]["doing"] == "saving");
    CHECK(slots[1]["now"]["done"].is_null());  // one call: nothing counted while it runs
    CHECK(slots[1]["now"]["total"] == 24077);
    CHECK(slots[2]["now"].is_null());

    const std::string b = "b";
    in.tenant = &b;
    const auto seen = status::build_status(in);
    CHECK(seen["backends"][0]["slots"][1]["now"]["doing"] == "saving");
    CHECK(seen["backends"][0]["slots"][1]["now"]["total"].is_null());
}
