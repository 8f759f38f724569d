// The disk tier's llama-server calls as values: each call's deadline, its request on the wire,
// and how its answer is read (upstream/slot_api.hpp).
#include "upstream/slot_api.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace up = warmslot::upstream;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

up::call_end answered(unsigned status, std::string body) {
    up::call_end e;
    e.answered = true;
    e.status = status;
    e.body = std::move(body);
    return e;
}

up::call_end no_answer(std::string why) {
    up::call_end e;
    e.error = std::move(why);
    return e;
}

}  // namespace

TEST_CASE("slot api: each call's deadline comes from one setting") {
    warmslot::config::config cfg;
    cfg.cache.slot_call_timeout = 1500ms;
    cfg.timeouts.upstream_response = 2h;
    const struct {
        up::slot_call call;
        std::chrono::milliseconds expected;
    } table[] = {
        {up::slot_call::save, 1500ms},
        {up::slot_call::restore, 1500ms},
        {up::slot_call::erase, 1500ms},
        {up::slot_call::prime, 2h},
        {up::slot_call::slots, up::query_timeout},
        {up::slot_call::apply_template, up::query_timeout},
        {up::slot_call::tokenize, up::query_timeout},
    };
    for (const auto& row : table) {
        INFO(static_cast<int>(row.call));
        CHECK(up::timeout_for(row.call, cfg) == row.expected);
    }
    CHECK(up::query_timeout == 120s);
}

TEST_CASE("slot api: requests as llama-server takes them") {
    const auto slots = up::slots_request();
    CHECK(slots.get);
    CHECK(slots.target == "/slots");
    CHECK(slots.body.empty());

    const auto save = up::save_request(3, "k.bin");
    CHECK_FALSE(save.get);
    CHECK(save.call == up::slot_call::save);
    CHECK(save.target == "/slots/3?action=save");
    CHECK(json::parse(save.body) == json{{"filename", "k.bin"}});

    const auto restore = up::restore_request(0, "k.bin");
    CHECK(restore.call == up::slot_call::restore);
    CHECK(restore.target == "/slots/0?action=restore");
    CHECK(json::parse(restore.body) == json{{"filename", "k.bin"}});

    const auto erase = up::erase_request(1);
    CHECK(erase.call == up::slot_call::erase);
    CHECK(erase.target == "/slots/1?action=erase");
    CHECK(erase.body == "{}");

    const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    const auto render = up::apply_template_request(chat);
    CHECK(render.target == "/apply-template");
    CHECK(json::parse(render.body) == chat);

    const auto tokenize = up::tokenize_request("text");
    CHECK(tokenize.target == "/tokenize");
    // The chat endpoint tokenizes with special tokens; /tokenize does not by default.
    CHECK(json::parse(tokenize.body) ==
          json{{"content", "text"}, {"add_special", true}, {"parse_special", true}});

    // Parts of one prompt: ids between the texts cut the answer; only a prompt's start gets BOS.
    const auto start = up::tokenize_parts_request({"a", "b"}, true, true);
    CHECK(json::parse(start.body) ==
          json{{"content", {"a", -1, "b"}}, {"add_special", true}, {"parse_special", true}});
    const auto later = up::tokenize_parts_request({"a", "b"}, false, false);
    CHECK(json::parse(later.body) ==
          json{{"content", {-1, "a", -1, "b"}}, {"add_special", false}, {"parse_special", false}});

    const auto prime = up::prime_request(2, {1, 15, 7});
    CHECK(prime.call == up::slot_call::prime);
    CHECK(prime.target == "/completion");
    CHECK(json::parse(prime.body) == json{{"prompt", {1, 15, 7}},
                                          {"n_predict", 1},
                                          {"id_slot", 2},
                                          {"cache_prompt", true},
                                          {"temperature", 0}});
}

TEST_CASE("slot api: a call's end says why for the log") {
    CHECK(answered(200, "{}").ok());
    CHECK_FALSE(answered(400, "{}").ok());
    CHECK(answered(400, "{}").what() == "400");
    CHECK_FALSE(no_answer("Operation canceled").ok());
    CHECK(no_answer("Operation canceled").what() == "Operation canceled");
}

TEST_CASE("slot api: save and restore answers") {
    const auto s = up::read_save_answer(
        answered(200, R"({"id_slot":0,"filename":"k.bin","n_saved":4096,"n_written":8388608,)"
                      R"("timings":{"save_ms":41.5}})"));
    REQUIRE(s.value);
    CHECK(s.value->tokens == 4096);
    CHECK(s.value->bytes == 8388608);
    CHECK(s.value->ms == doctest::Approx(41.5));
    CHECK(s.end.status == 200);

    const auto r = up::read_restore_answer(
        answered(200, R"({"n_restored":4096,"n_read":8388608,"timings":{"restore_ms":12}})"));
    REQUIRE(r.value);
    CHECK(r.value->tokens == 4096);
    CHECK(r.value->ms == doctest::Approx(12));

    const auto bare = up::read_restore_answer(answered(200, R"({})"));
    REQUIRE(bare.value);
    CHECK(bare.value->tokens == 0);
    CHECK(bare.value->ms == 0);

    // A refused restore keeps its body: whether the file is dropped is judged from it.
    const std::string refused =
        R"({"error":{"code":400,"message":"Unable to restore slot","type":"invalid_request_error"}})";
    const auto failed = up::read_restore_answer(answered(400, refused));
    CHECK_FALSE(failed.value);
    CHECK(failed.end.body == refused);
    CHECK_FALSE(up::read_save_answer(answered(200, "not json")).value);
    CHECK_FALSE(up::read_save_answer(answered(200, "[]")).value);
    CHECK_FALSE(up::read_save_answer(no_answer("timeout")).value);
    CHECK_THROWS_AS(up::read_save_answer(answered(200, R"({"n_saved":"many"})")), json::type_error);
}

TEST_CASE("slot api: rendering and tokenizing answers") {
    CHECK(up::read_template_answer(answered(200, R"({"prompt":"<s>hi"})")).value == "<s>hi");
    CHECK_FALSE(up::read_template_answer(answered(200, R"({"prompt":7})")).value);
    CHECK_FALSE(up::read_template_answer(answered(500, R"({"prompt":"x"})")).value);
    CHECK_FALSE(up::read_template_answer(answered(200, "[]")).value);

    const auto t = up::read_tokenize_answer(answered(200, R"({"tokens":[1,15043,3186]})"));
    REQUIRE(t.value);
    CHECK(*t.value == std::vector<int>{1, 15043, 3186});
    CHECK_FALSE(up::read_tokenize_answer(answered(200, R"({"tokens":[{"id":1}]})")).value);
    CHECK_FALSE(up::read_tokenize_answer(answered(200, R"({"tokens":"1 2"})")).value);
    CHECK_FALSE(up::read_tokenize_answer(no_answer("refused")).value);

    // Read by the scanner (llama-server's own layout), and by the JSON reader otherwise.
    struct row {
        std::string body;
        std::optional<std::vector<int>> want;
    };
    const std::vector<row> rows = {
        {R"({"tokens":[]})", std::vector<int>{}},
        {R"({ "tokens" : [ 1 , -1,2147483647 ,-2147483648 ] } )",
         std::vector<int>{1, -1, 2147483647, -2147483647 - 1}},
        {R"({"tokens":[2147483648]})", std::nullopt},
        {R"({"tokens":[99999999999999999999]})", std::nullopt},
        {R"({"tokens":[1,]})", std::nullopt},
        {R"({"tokens":[1 2]})", std::nullopt},
        {R"({"tokens":[-]})", std::nullopt},
        {R"({"tokens":[1]})", std::vector<int>{1}},
        {R"({"tokens":[1]} x)", std::nullopt},
        {R"({"tokens":[1],"extra":true})", std::vector<int>{1}},  // the JSON reader's
        {R"({"tokens":[1.5]})", std::nullopt},
        {R"({"tokens":[1e3]})", std::nullopt},
    };
    for (const auto& r : rows) {
        CAPTURE(r.body);
        CHECK(up::read_tokenize_answer(answered(200, r.body)).value == r.want);
    }

    const auto parts =
        up::read_tokenize_parts_answer(answered(200, R"({"tokens":[-1,5,6,-1,-1,7]})"));
    REQUIRE(parts.value);
    CHECK(*parts.value == std::vector<std::vector<int>>{{}, {5, 6}, {}, {7}});
    CHECK_FALSE(up::read_tokenize_parts_answer(answered(500, R"({"tokens":[1]})")).value);
}

TEST_CASE("slot api: slots and priming answers") {
    const auto s = up::read_slots_answer(answered(200, R"([{"id":0,"n_prompt_tokens":12}])"));
    REQUIRE(s.value);
    CHECK((*s.value)[0]["n_prompt_tokens"] == 12);
    CHECK_FALSE(up::read_slots_answer(answered(200, R"({"id":0})")).value);
    CHECK_FALSE(up::read_slots_answer(answered(501, "[]")).value);

    const auto p = up::read_prime_answer(answered(
        200, R"({"content":"x","timings":{"cache_n":3,"prompt_n":4093,"predicted_n":1}})"));
    REQUIRE(p.value);
    CHECK(p.value->cached == 3);
    CHECK(p.value->processed == 4093);
    // Answered without timings (a chat parser refused the sampled token): no stats, but an
    // answer, after which the slot itself is looked at.
    const auto refused = up::read_prime_answer(answered(500, R"({"error":{}})"));
    CHECK_FALSE(refused.value);
    CHECK(refused.end.answered);
}
