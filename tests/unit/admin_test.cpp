// Admin request shapes, the warm-up's message layout, and reserving a slot for a save.
#include "api/admin.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "routing/fingerprint.hpp"
#include "routing/registry.hpp"

namespace api = warmslot::api;
namespace routing = warmslot::routing;
using nlohmann::json;

TEST_CASE("parse_warm_request: model required, system and documents strings, no other field") {
    const auto ok =
        api::parse_warm_request(json{{"model", "m"}, {"system", "S"}, {"documents", {"d1", "d2"}}});
    REQUIRE(std::holds_alternative<api::warm_request>(ok));
    const auto& w = std::get<api::warm_request>(ok);
    CHECK(w.model == "m");
    CHECK(w.system == "S");
    CHECK(w.documents == std::vector<std::string>{"d1", "d2"});

    const json bad[] = {
        json::array(),
        json{{"system", "S"}},
        json{{"model", ""}, {"system", "S"}},
        json{{"model", "m"}},
        json{{"model", "m"}, {"system", 3}},
        json{{"model", "m"}, {"documents", "d"}},
        json{{"model", "m"}, {"documents", {1}}},
        json{{"model", "m"}, {"system", "S"}, {"question", "q"}},
    };
    for (const auto& b : bad) {
        CAPTURE(b.dump());
        CHECK(std::holds_alternative<std::string>(api::parse_warm_request(b)));
    }
}

TEST_CASE("warm_chat_body: a client's request with the same material shares its stable prefix") {
    api::warm_request w{"m", "You answer from the documents.", {"doc one", "doc two"}};
    const auto warm =
        routing::fingerprint_request(routing::request_kind::chat, api::warm_chat_body(w, "?"));
    const json client = {{"model", "m"},
                         {"max_tokens", 30},
                         {"temperature", 0.2},
                         {"stream", true},
                         {"messages",
                          {{{"role", "system"}, {"content", "You answer from the documents."}},
                           {{"role", "user"}, {"content", "doc one"}},
                           {{"role", "user"}, {"content", "doc two"}},
                           {{"role", "user"}, {"content", "What does doc two say?"}}}}};
    const auto asked = routing::fingerprint_request(routing::request_kind::chat, client);
    REQUIRE(warm);
    REQUIRE(asked);
    CHECK(warm->stable_levels == 3);
    CHECK(asked->stable_levels == 3);
    CHECK(routing::common_levels(warm->levels, asked->levels) == 3);

    // Without a system prompt the documents come first; another model name renders the same
    // prompt (the model picks the backend, and files are keyed by the backend's model).
    api::warm_request bare{"m", "", {"doc one"}};
    CHECK(api::warm_chat_body(bare, "q")["messages"].size() == 2);
    CHECK(api::warm_chat_body(bare, "q")["messages"][0]["role"] == "user");
    w.model = "other";
    const auto other =
        routing::fingerprint_request(routing::request_kind::chat, api::warm_chat_body(w, "?"));
    CHECK(routing::common_levels(other->levels, asked->levels) == 3);
}

TEST_CASE("parse_snapshot_request: empty body or no field means every backend") {
    using result = std::variant<std::optional<std::string>, std::string>;
    auto backend = [](const result& r) { return std::get<std::optional<std::string>>(r); };
    CHECK(backend(api::parse_snapshot_request("")) == std::nullopt);
    CHECK(backend(api::parse_snapshot_request(" \n")) == std::nullopt);
    CHECK(backend(api::parse_snapshot_request("{}")) == std::nullopt);
    CHECK(backend(api::parse_snapshot_request(R"({"backend":"b1"})")) == "b1");
    for (const char* bad : {"{", "[]", R"({"backend":1})", R"({"backends":"b"})"}) {
        CAPTURE(bad);
        CHECK(std::holds_alternative<std::string>(api::parse_snapshot_request(bad)));
    }
}

TEST_CASE("parse_warm_args: flags, repeated --doc, defaults and errors") {
    const auto ok = api::parse_warm_args(
        {"--model", "m", "--system", "s.txt", "--doc", "a", "--doc", "b", "--api-key-env", "K"});
    REQUIRE(std::holds_alternative<api::warm_args>(ok));
    const auto& a = std::get<api::warm_args>(ok);
    CHECK(a.model == "m");
    CHECK(a.system_file == "s.txt");
    CHECK(a.doc_files == std::vector<std::string>{"a", "b"});
    CHECK(a.url == "http://127.0.0.1:8080");
    CHECK(a.api_key_env == "K");
    const std::vector<std::vector<std::string>> bad = {
        {},
        {"--system", "s"},
        {"--model", "m"},
        {"--model", "m", "--system"},
        {"--model", "m", "--system", "s", "--what", "x"}};
    for (const auto& args : bad)
        CHECK(std::holds_alternative<std::string>(api::parse_warm_args(args)));
}

TEST_CASE("registry: multi_model follows the backends' model files and retirements") {
    routing::registry reg({"a", "b", "c"}, routing::planner_settings{});
    CHECK_FALSE(reg.multi_model());  // nothing known yet
    const auto info = [](std::string path) {
        routing::backend_info i;
        i.total_slots = 1;
        i.model_path = std::move(path);
        return i;
    };
    reg.set_info(0, info("/models/m.gguf"), true);
    reg.set_info(1, info("C:\\other\\m.gguf"), true);  // a replica: same file, other directory
    CHECK_FALSE(reg.multi_model());
    reg.set_info(2, info("/models/n.gguf"), true);
    CHECK(reg.multi_model());
    const routing::planner_settings settings;
    reg.sync({"a", "b", "c"}, {false, false, true}, settings);  // the other model retired
    CHECK_FALSE(reg.multi_model());
    reg.sync({"a", "b", "c"}, {false, false, false}, settings);
    CHECK(reg.multi_model());
}

TEST_CASE("reserve_idle_slot: only an idle slot still holding the prefix; release keeps it") {
    routing::registry reg({"b"}, routing::planner_settings{});
    routing::backend_info info;
    info.total_slots = 2;
    info.model_path = "m.gguf";
    reg.set_info(0, info, true);
    reg.set_healthy(0, true);
    std::string doc(6000, 'x');
    const json body = {
        {"messages",
         {{{"role", "system"}, {"content", doc}}, {{"role", "user"}, {"content", "q"}}}}};
    const auto fp = routing::fingerprint_request(routing::request_kind::chat, body);
    REQUIRE(fp);
    const std::vector<routing::prefix_level> stable(fp->levels.begin(), fp->levels.begin() + 1);
    auto t = reg.reserve(&*fp, "", fp->total_bytes, routing::clock::now());
    REQUIRE(t.p.slot);
    const int slot = *t.p.slot;
    CHECK_FALSE(reg.reserve_idle_slot(0, slot, stable));  // busy with the request
    reg.complete(t, &*fp, warmslot::api::prompt_stats{0, 2000, 2, 100}, routing::clock::now());

    auto mine = reg.reserve_idle_slot(0, slot, stable);
    REQUIRE(mine);
    CHECK_FALSE(reg.reserve_idle_slot(0, slot, stable));  // ours now
    reg.release(*mine);
    CHECK(reg.snapshot()[0].slots[static_cast<std::size_t>(slot)].held == fp->levels);
    auto again = reg.reserve_idle_slot(0, slot, stable);
    REQUIRE(again);
    reg.release(*again);

    const std::vector<routing::prefix_level> other = {{12345, 10}};
    CHECK_FALSE(reg.reserve_idle_slot(0, 1 - slot, stable));  // holds nothing
    CHECK_FALSE(reg.reserve_idle_slot(0, slot, other));
    CHECK_FALSE(reg.reserve_idle_slot(0, 7, stable));

    // Empty must_hold: whatever the slot holds (a rival to erase).
    auto any = reg.reserve_idle_slot(0, 1 - slot, {});
    REQUIRE(any);
    reg.release(*any);
    // A request llama-server places itself may be anywhere: refused, unless the caller has just
    // seen the slot idle on the server.
    auto floating = reg.reserve(&*fp, "", fp->total_bytes, routing::clock::now());
    REQUIRE(floating.p.slot);
    reg.mark_floating(floating);
    const int other_slot = 1 - *floating.p.slot;
    CHECK_FALSE(reg.reserve_idle_slot(0, other_slot, {}));
    auto seen = reg.reserve_idle_slot(0, other_slot, {}, true);
    REQUIRE(seen);
    CHECK_FALSE(reg.reserve_idle_slot(0, *floating.p.slot, {}, true));  // the request's own
    // Erased: the registry then knows the slot holds nothing.
    reg.set_held(*seen, {}, 0);
    reg.release(*seen);
    CHECK(reg.snapshot()[0].slots[static_cast<std::size_t>(other_slot)].held.empty());
    reg.release(floating);
}
