// The backend monitor against the fake llama-server: restarts (with and without a moment of
// refused connections, with the same or another build), outside traffic, unreadable answers and
// slots that do not keep their contents. What warmslot believes is read from its status JSON;
// what it did from the fake's record and the answers' headers.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "tier_harness.hpp"

namespace warmslot::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::size_t doc_bytes = 2000;

struct watched {
    temp_dir tmp;
    fake_llama fake;
    tier_proxy proxy;
    explicit watched(fake_options o, std::chrono::milliseconds interval = 100ms,
                     bool wait_ready = true)
        : fake(in_tmp(std::move(o), tmp)), proxy(make(fake, tmp, interval)) {
        if (wait_ready) REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
    }
    static fake_options in_tmp(fake_options o, const temp_dir& t) {
        o.slot_dir = (t.path / "slots-a").string();
        fs::create_directories(o.slot_dir);
        o.model_path = (t.path / "model.gguf").string();
        return o;
    }
    static config::config make(const fake_llama& f, const temp_dir& t,
                               std::chrono::milliseconds interval) {
        auto c = tier_config({backend_for("a", f)}, t.path.string());
        c.routing.reconcile_interval = interval;
        return c;
    }
    // The first request of `doc`: its prefix primed and saved; returns the prefix's tokens.
    std::uint64_t first(const std::string& doc) {
        const auto r = proxy.chat(chat_body(doc, "First?"));
        REQUIRE(r.status == 200);
        const auto disk = r.header("x-warmslot-disk");
        REQUIRE(disk.starts_with("snapshot "));
        return std::stoull(disk.substr(9));
    }
};

fake_options one_slot() {
    fake_options o;
    o.slots = 1;
    return o;
}

json timings_of(const http_reply& r) {
    const auto j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("timings") ? j["timings"] : json();
}

std::string build_of(const tier_proxy& p) {
    const auto s = p.status();
    return s["backends"][0]["build"].is_string() ? s["backends"][0]["build"].get<std::string>()
                                                 : "";
}

// The request after a restart must not be sent as a hit into the emptied slot: it is planned
// as a miss there and the prefix's file is restored first, so llama-server computes only the
// question.
void check_restored(watched& w, const std::string& doc, std::uint64_t n) {
    const auto restores = w.fake.calls("restore").size();
    const auto body = chat_body(doc, "After the restart?");
    const auto r = w.proxy.chat(body);
    CAPTURE(r.head());
    CHECK(r.status == 200);
    CHECK(r.header("x-warmslot-route").starts_with("miss"));
    CHECK(r.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(w.fake.calls("restore").size() == restores + 1);
    CHECK(timings_of(r)["cache_n"] == n);
    CHECK(timings_of(r)["prompt_n"] == prompt_tokens(body).size() - n);
}

std::size_t count_answered(const std::vector<fake_call>& calls, const std::string& key) {
    return static_cast<std::size_t>(std::count_if(
        calls.begin(), calls.end(),
        [&](const fake_call& c) { return c.key == key && c.method == "GET" && c.status == 200; }));
}

}  // namespace

TEST_CASE("monitor: a backend that stops answering for a moment is taken to have restarted") {
    watched w(one_slot());
    const auto doc = document(11, doc_bytes);
    const auto n = w.first(doc);
    REQUIRE(w.proxy.believed_tokens(0, 0) > n);

    w.fake.restart(400ms);
    // Refused while it is down: a check finds it so; when it answers, its slots are forgotten.
    REQUIRE(eventually([&] { return !w.proxy.ready(0); }, 3s));
    REQUIRE(eventually([&] { return w.proxy.ready(0); }, 5s));
    CHECK(w.proxy.believed_tokens(0, 0) == 0);
    check_restored(w, doc, n);
}

TEST_CASE("monitor: a restart between two checks is told by task numbers that began again") {
    watched w(one_slot());
    const auto doc = document(12, doc_bytes);
    const auto n = w.first(doc);
    REQUIRE(w.proxy.believed_tokens(0, 0) > n);
    const auto slots_reads = w.fake.calls("/slots").size();

    w.fake.restart();  // no refused connection, the same identity
    REQUIRE(w.fake.wait_for(
        [&](const std::vector<fake_call>& calls) {
            return std::count_if(calls.begin(), calls.end(), [](const fake_call& c) {
                       return c.key == "/slots" && c.status == 200;
                   }) > static_cast<long>(slots_reads);
        },
        3s));
    REQUIRE(eventually([&] { return w.proxy.believed_tokens(0, 0) == 0; }, 3s));
    check_restored(w, doc, n);
}

TEST_CASE("monitor: a request that meets a restart before any check is planned again") {
    // Checks are far apart: only the request's own calls can see the restart (the pooled
    // connection the restart closed).
    watched w(one_slot(), 30s);
    const auto doc = document(13, doc_bytes);
    const auto n = w.first(doc);
    w.fake.restart();
    CHECK(w.proxy.believed_tokens(0, 0) > n);  // nothing told warmslot yet
    check_restored(w, doc, n);
}

TEST_CASE("monitor: a restart with another build is a new identity: old files are not loaded") {
    watched w(one_slot());
    const auto doc = document(14, doc_bytes);
    const auto n = w.first(doc);
    const auto old_file = json::parse(w.fake.calls("save").at(0).body)["filename"];

    w.fake.restart(0ms, "b2-fake");
    REQUIRE(eventually([&] { return build_of(w.proxy) == "b2-fake" && w.proxy.ready(0); }, 5s));
    CHECK(w.proxy.believed_tokens(0, 0) == 0);
    const auto restores = w.fake.calls("restore").size();
    const auto r = w.proxy.chat(chat_body(doc, "After the upgrade?"));
    CAPTURE(r.head());
    CHECK(r.header("x-warmslot-route").starts_with("miss"));
    CHECK(r.header("x-warmslot-disk") == "snapshot " + std::to_string(n) + " tokens");
    const auto saves = w.fake.calls("save");
    REQUIRE(saves.size() == 2);
    CHECK(json::parse(saves[1].body)["filename"] != old_file);
    // The only restore is the new snapshot's own reload (the architecture is unknown), of the
    // new file.
    for (std::size_t i = restores; i < w.fake.calls("restore").size(); ++i)
        CHECK(json::parse(w.fake.calls("restore")[i].body)["filename"] != old_file);
}

TEST_CASE("monitor: a slot another client used is not believed to hold the prefix any more") {
    watched w(one_slot());
    const auto doc = document(15, doc_bytes);
    const auto n = w.first(doc);
    const auto before = w.proxy.believed_tokens(0, 0);
    w.fake.put_tokens(0, fake_tokenize("someone else's prompt", true, true));
    REQUIRE(eventually([&] { return w.proxy.believed_tokens(0, 0) != before; }, 3s));
    check_restored(w, doc, n);
}

TEST_CASE(
    "monitor: an unreadable /slots answer marks the backend unhealthy until it answers properly") {
    watched w(one_slot());
    const std::string bad = R"([{"id":"zero","is_processing":false}])";
    w.fake.script_slots({bad, bad, bad, bad, bad});
    CHECK(eventually([&] { return !w.proxy.ready(0); }, 3s));
    CHECK(eventually([&] { return w.proxy.ready(0); }, 5s));
    const auto r = w.proxy.chat(chat_body(document(16, doc_bytes), "Still there?"));
    CHECK(r.status == 200);
    CHECK(r.header("x-warmslot-slot") == "0");
}

TEST_CASE("monitor: slots that lose their contents between two reads are passed through unrouted") {
    // The probe's reads: the check's own, the probe's before, the probe's after its two pinned
    // prompts. The last shows the first probed slot (the higher id) empty, as a server that
    // moves idle slots into its RAM cache would.
    fake_options o;
    o.slots = 2;
    const std::string idle =
        R"([{"id":0,"n_ctx":16384,"is_processing":false},{"id":1,"n_ctx":16384,"is_processing":false}])";
    const std::string cleared =
        R"([{"id":0,"n_ctx":16384,"is_processing":false,"id_task":1,"n_prompt_tokens":2},)"
        R"({"id":1,"n_ctx":16384,"is_processing":false,"id_task":0,"n_prompt_tokens":0}])";
    temp_dir holder;  // scripted before warmslot starts watching
    auto fake_opts = watched::in_tmp(o, holder);
    fake_llama fake(fake_opts);
    fake.script_slots({idle, idle, cleared});
    tier_proxy proxy(watched::make(fake, holder, 100ms));
    REQUIRE(eventually(
        [&] {
            const auto s = proxy.status();
            return s.contains("backends") && s["backends"][0].value("healthy", false) &&
                   !s["backends"][0].value("pass_through_reason", "").empty();
        },
        5s));
    // The probe ran (two pinned prompts, then both slots erased) and found the contents gone;
    // later checks leave it at that.
    REQUIRE(fake.wait_for(
        [](const std::vector<fake_call>& calls) {
            return std::count_if(calls.begin(), calls.end(), [](const fake_call& c) {
                       return c.key == "erase" && c.status == 200;
                   }) == 2;
        },
        3s));
    CHECK(fake.calls("/completion").size() == 2);
    const auto reads = fake.calls("/slots").size();
    REQUIRE(fake.wait_for(
        [&](const std::vector<fake_call>& calls) {
            return static_cast<std::size_t>(
                       std::count_if(calls.begin(), calls.end(), [](const fake_call& c) {
                           return c.key == "/slots" && c.status == 200;
                       })) >= reads + 2;
        },
        3s));
    CHECK_FALSE(proxy.ready(0));
    const auto r = proxy.chat(chat_body(document(17, doc_bytes), "Unrouted?"));
    CHECK(r.status == 200);
    CHECK(r.header("x-warmslot-slot") == "-");
    const auto chats = fake.calls("/v1/chat/completions");
    REQUIRE(chats.size() == 1);
    CHECK(!json::parse(chats[0].body).contains("id_slot"));
    CHECK(fake.calls("save").empty());
}

TEST_CASE(
    "monitor: a slot /slots shows busy with a task warmslot did not send is waited for, not "
    "pinned") {
    watched w(one_slot());
    const auto doc = document(18, doc_bytes);
    const auto n = w.first(doc);
    const auto held = w.proxy.believed_tokens(0, 0);
    // Past warmslot's own tail of the first request (a busy slot right after it is its own).
    auto reads = w.fake.calls("/slots").size();
    REQUIRE(w.fake.wait_for(
        [&](const std::vector<fake_call>& c) { return count_answered(c, "/slots") >= reads + 4; },
        3s));
    const std::string busy =
        R"([{"id":0,"n_ctx":16384,"is_processing":true,"id_task":9,"n_prompt_tokens":)" +
        std::to_string(held) + "}]";
    reads = w.fake.calls("/slots").size();
    w.fake.script_slots({busy, busy, busy, busy});
    // The monitor has read a busy answer and told the registry (the fake's answer alone may be
    // still on its way to it).
    REQUIRE(eventually(
        [&] { return w.proxy.status()["backends"][0]["slots"][0]["state"] == "busy"; }, 3s));

    const auto r = w.proxy.chat(chat_body(doc, "While it is busy?"));
    CAPTURE(r.head());
    CHECK(r.status == 200);
    const auto all = w.fake.calls();
    std::vector<fake_call> slot_reads, chats;
    for (const auto& c : all) {
        if (c.key == "/slots" && c.method == "GET") slot_reads.push_back(c);
        if (c.key == "/v1/chat/completions") chats.push_back(c);
    }
    REQUIRE(chats.size() == 2);
    REQUIRE(slot_reads.size() >= reads + 5);
    // Sent only once a read showed the slot idle again, then pinned there as the hit it is.
    CHECK(chats[1].at > slot_reads[reads + 3].at);
    CHECK(json::parse(chats[1].body)["id_slot"] == 0);
    CHECK(timings_of(r)["cache_n"].get<std::uint64_t>() >= n);
}

TEST_CASE("monitor: a restart with fewer slots is a new layout: beliefs and plans follow it") {
    fake_options o;
    o.slots = 3;
    watched w(o);
    const auto a = w.proxy.chat(chat_body(document(19, doc_bytes), "On three slots?"));
    REQUIRE(a.status == 200);
    const auto before = w.fake.calls().size();
    w.fake.restart(0ms, std::nullopt, 1);
    REQUIRE(eventually(
        [&] {
            const auto s = w.proxy.status();
            return s["backends"][0]["total_slots"] == 1 && s["backends"][0]["slots"].size() == 1 &&
                   w.proxy.ready(0);
        },
        5s));
    for (int i = 0; i < 3; ++i) {
        const auto r = w.proxy.chat(chat_body(document(40 + i, doc_bytes), "On one slot?"));
        CAPTURE(r.head());
        CHECK(r.status == 200);
        CHECK(r.header("x-warmslot-slot") == "0");
    }
    // Nothing after the restart names a slot the new process does not have.
    const auto calls = w.fake.calls();
    for (std::size_t i = before; i < calls.size(); ++i) {
        CAPTURE(calls[i].target);
        CHECK(calls[i].slot <= 0);
        const auto body = json::parse(calls[i].body, nullptr, false);
        if (body.is_object() && body.contains("id_slot")) CHECK(body["id_slot"] == 0);
        CHECK(calls[i].status != 400);
    }
}

TEST_CASE(
    "monitor: a request while the only backend is down waits for it to come back, and its prefix "
    "is restored there") {
    watched w(one_slot());
    const auto doc = document(23, doc_bytes);
    const auto n = w.first(doc);
    const auto restores = w.fake.calls("restore").size();
    w.fake.restart(1500ms);
    // Its connection closed as the process ended: the monitor knows at once.
    REQUIRE(eventually([&] { return !w.proxy.ready(0); }, 2s));
    const auto body = chat_body(doc, "While it is down?");
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = w.proxy.chat(body);
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(r.head());
    CHECK(r.status == 200);
    CHECK(took > 500ms);  // it waited for the process
    CHECK(r.header("x-warmslot-route").starts_with("miss"));
    CHECK(r.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(w.fake.calls("restore").size() == restores + 1);
    CHECK(timings_of(r)["cache_n"] == n);
    CHECK(timings_of(r)["prompt_n"] == prompt_tokens(body).size() - n);
}

TEST_CASE(
    "monitor: past the backend's start_timeout a request for a backend that is down gets 502") {
    temp_dir tmp;
    fake_llama fake(watched::in_tmp(one_slot(), tmp));
    auto cfg = watched::make(fake, tmp, 100ms);
    cfg.backends[0].start_timeout = 300ms;
    tier_proxy proxy(std::move(cfg));
    REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
    const auto doc = document(29, doc_bytes);
    REQUIRE(proxy.chat(chat_body(doc, "First?")).status == 200);
    fake.restart(3000ms);
    REQUIRE(eventually([&] { return !proxy.ready(0); }, 2s));
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = proxy.chat(chat_body(doc, "While it is down?"));
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(r.body);
    CHECK(r.status == 502);
    const auto err = json::parse(r.body, nullptr, false);
    CHECK((err.is_object() && err.contains("error") && err["error"]["code"] == 502));
    CHECK(took < 2500ms);  // it gave up before the backend came back
    REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
}

TEST_CASE("monitor: a restart while llama-server computes a request, before its first byte") {
    watched w(one_slot());
    const auto doc = document(24, doc_bytes);
    const auto n = w.first(doc);
    w.fake.delay("/v1/chat/completions", 500ms, 1);
    const auto chats = w.fake.calls("/v1/chat/completions").size();
    http_reply r;
    std::thread client([&] { r = w.proxy.chat(chat_body(doc, "Cut off?")); });
    const bool computing = w.fake.wait_for(
        [&](const std::vector<fake_call>& calls) {
            return static_cast<std::size_t>(
                       std::count_if(calls.begin(), calls.end(), [](const fake_call& c) {
                           return c.key == "/v1/chat/completions" && c.handled;
                       })) > chats;
        },
        3s);
    w.fake.restart();
    client.join();
    REQUIRE(computing);
    CAPTURE(r.head());
    CAPTURE(r.body);
    // Nothing reached the client: warmslot may try again, on the new process.
    CHECK(r.status == 200);
    CHECK(timings_of(r).is_object());
    // Whatever it did, what it believes of the slot is what the slot holds.
    CHECK(eventually([&] { return w.proxy.believed_tokens(0, 0) == w.fake.slot_tokens(0).size(); },
                     3s));
    const auto again = w.proxy.chat(chat_body(doc, "And now?"));
    CAPTURE(again.head());
    CHECK(again.status == 200);
    CHECK(timings_of(again)["cache_n"].get<std::uint64_t>() >= n);
}

}  // namespace warmslot::testing
