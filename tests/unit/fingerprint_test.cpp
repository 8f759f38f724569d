// Prefix fingerprints as tables: which body changes move which levels, segment boundaries,
// stable levels, completion chunking and the bodies that are not fingerprinted.
#include "routing/fingerprint.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rt = warmslot::routing;
using nlohmann::json;
using rt::request_kind;

namespace {

rt::fingerprint chat_fp(const json& body) {
    auto fp = rt::fingerprint_request(request_kind::chat, body);
    REQUIRE(fp.has_value());
    return *fp;
}

rt::fingerprint completion_fp(const json& body) {
    auto fp = rt::fingerprint_request(request_kind::completion, body);
    REQUIRE(fp.has_value());
    return *fp;
}

json base_chat() {
    return json::parse(R"({
      "model": "qwen",
      "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Read this document."},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Summarise it."}
      ]
    })");
}

json with(json body, std::string_view key, json value) {
    body[std::string(key)] = std::move(value);
    return body;
}

}  // namespace

TEST_CASE("the same body gives the same fingerprint") {
    const auto a = chat_fp(base_chat());
    const auto b = chat_fp(json::parse(base_chat().dump()));
    CHECK(a.levels == b.levels);
    CHECK(a.levels.size() == 4);
    CHECK(a.model == "qwen");
    CHECK(rt::common_levels(a.levels, b.levels) == 4);
}

TEST_CASE("sampling, output, model and per-session fields do not change any level") {
    const auto base = chat_fp(base_chat());
    const std::vector<std::pair<std::string_view, json>> rows = {
        {"temperature", 0.2},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}},
        {"max_tokens", 17},
        {"seed", 42},
        {"stop", {"\n\n"}},
        {"id_slot", 1},
        {"cache_prompt", false},
        {"model", "llama"},
        {"user", "ann"},
        {"metadata", {{"user_id", "u-1"}}},
        {"prompt_cache_key", "0199a2-session"},
        {"client_metadata", {{"x-codex-turn-metadata", "{\"turn_id\":\"t1\"}"}}},
        {"include", {"reasoning.encrypted_content"}},
        {"store", false},
        {"thinking_budget_tokens", 1024},
        {"grammar", "root ::= \"x\""},
        {"some_future_field", 1},
    };
    for (const auto& row : rows) {
        const std::string_view key = row.first;
        const json& value = row.second;
        CAPTURE(key);
        CHECK(chat_fp(with(base_chat(), key, value)).levels == base.levels);
    }
}

TEST_CASE("fields that reach the rendered prompt or the cache change every level") {
    const auto base = chat_fp(base_chat());
    const std::vector<std::pair<std::string_view, json>> rows = {
        {"tools", json::parse(R"([{"type":"function","function":{"name":"f"}}])")},
        {"chat_template_kwargs", {{"enable_thinking", false}}},
        {"tool_choice", "auto"},
        {"parallel_tool_calls", true},
        {"add_generation_prompt", false},
        {"continue_final_message", true},
        {"reasoning_format", "none"},
        {"reasoning_effort", "low"},
        {"response_format", {{"type", "json_object"}}},
        {"json_schema", {{"type", "object"}}},
        {"lora", json::parse(R"([{"id":0,"scale":0.5}])")},
    };
    for (const auto& row : rows) {
        const std::string_view key = row.first;
        const json& value = row.second;
        CAPTURE(key);
        const auto fp = chat_fp(with(base_chat(), key, value));
        REQUIRE(fp.levels.size() == base.levels.size());
        for (std::size_t i = 0; i < fp.levels.size(); ++i) {
            CHECK(fp.levels[i].hash != base.levels[i].hash);
        }
        CHECK(rt::common_levels(fp.levels, base.levels) == 0);
    }
}

TEST_CASE("appending a message keeps the earlier levels") {
    const auto base = chat_fp(base_chat());
    auto body = base_chat();
    body["messages"].push_back({{"role", "assistant"}, {"content", "It says hello."}});
    const auto longer = chat_fp(body);
    REQUIRE(longer.levels.size() == 5);
    CHECK(rt::common_levels(base.levels, longer.levels) == 4);
    CHECK(longer.total_bytes == base.total_bytes + 14);
}

TEST_CASE("editing message k changes levels k and after, not before") {
    const auto base = chat_fp(base_chat());
    for (std::size_t k = 0; k < 4; ++k) {
        CAPTURE(k);
        auto body = base_chat();
        body["messages"][k]["content"] = "edited";
        const auto fp = chat_fp(body);
        CHECK(rt::common_levels(base.levels, fp.levels) == k);
        for (std::size_t i = k; i < 4; ++i) CHECK(fp.levels[i].hash != base.levels[i].hash);
    }
}

TEST_CASE("every message field is part of the segment") {
    const auto base = chat_fp(base_chat());
    const std::vector<std::pair<std::string_view, json>> rows = {
        {"name", "alice"},      {"tool_calls", json::parse(R"([{"id":"c1","type":"function"}])")},
        {"tool_call_id", "c1"}, {"reasoning_content", "thinking"},
        {"content", nullptr},   {"role", "developer"},
    };
    for (const auto& row : rows) {
        const std::string_view key = row.first;
        const json& value = row.second;
        CAPTURE(key);
        auto body = base_chat();
        body["messages"][2][std::string(key)] = value;
        CHECK(rt::common_levels(base.levels, chat_fp(body).levels) == 2);
    }
}

TEST_CASE("content: a string equals an array of one text part") {
    const auto text = json::parse(R"({"messages":[{"role":"user","content":"hello"}]})");
    const auto parts =
        json::parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]})");
    const auto two = json::parse(R"({"messages":[{"role":"user","content":[
        {"type":"text","text":"hel"},{"type":"text","text":"lo"}]}]})");
    const auto image = json::parse(R"({"messages":[{"role":"user","content":[
        {"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"data:x"}}]}]})");
    const auto empty = json::parse(R"({"messages":[{"role":"user","content":[]}]})");
    const auto null = json::parse(R"({"messages":[{"role":"user","content":null}]})");
    const auto absent = json::parse(R"({"messages":[{"role":"user"}]})");
    CHECK(chat_fp(text).levels == chat_fp(parts).levels);
    CHECK(chat_fp(text).levels != chat_fp(two).levels);
    CHECK(chat_fp(text).levels != chat_fp(image).levels);
    CHECK(chat_fp(image).total_bytes == 5 + json::parse(R"({"type":"image_url",
        "image_url":{"url":"data:x"}})")
                                                .dump()
                                                .size());
    CHECK(chat_fp(empty).levels != chat_fp(null).levels);
    CHECK(chat_fp(null).levels != chat_fp(absent).levels);
    CHECK(chat_fp(null).total_bytes == 0);
}

TEST_CASE("segment boundaries are unambiguous") {
    const auto parse = [](std::string_view s) { return chat_fp(json::parse(s)).levels; };
    // "ab","c" vs "a","bc" across messages: the second level differs.
    CHECK(parse(R"({"messages":[{"role":"user","content":"ab"},{"role":"user","content":"c"}]})")
              .back() !=
          parse(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"bc"}]})")
              .back());
    // ... and across content parts.
    CHECK(parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"ab"},
                     {"type":"text","text":"c"}]}]})") !=
          parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},
                     {"type":"text","text":"bc"}]}]})"));
    // role and content swapped
    CHECK(parse(R"({"messages":[{"role":"user","content":"assistant"}]})") !=
          parse(R"({"messages":[{"role":"assistant","content":"user"}]})"));
    // a string null vs a JSON null
    CHECK(parse(R"({"messages":[{"role":"user","content":"null"}]})") !=
          parse(R"({"messages":[{"role":"user","content":null}]})"));
    // name vs tool_call_id holding the same string
    CHECK(parse(R"({"messages":[{"role":"tool","name":"x","content":""}]})") !=
          parse(R"({"messages":[{"role":"tool","tool_call_id":"x","content":""}]})"));
}

TEST_CASE("Japanese text: bytes are UTF-8 bytes") {
    const auto fp = chat_fp(json::parse(R"({"messages":[
        {"role":"system","content":"日本語で答えてください。"},
        {"role":"user","content":"東京の天気は？"}]})"));
    CHECK(fp.levels[0].bytes == std::string("日本語で答えてください。").size());
    CHECK(fp.total_bytes == fp.levels[0].bytes + std::string("東京の天気は？").size());
    CHECK(fp.longest_segment_bytes == fp.levels[0].bytes);
    const auto other = chat_fp(json::parse(R"({"messages":[
        {"role":"system","content":"日本語で答えてください。"},
        {"role":"user","content":"大阪の天気は？"}]})"));
    CHECK(rt::common_levels(fp.levels, other.levels) == 1);
}

TEST_CASE("stable levels end before the final user turn") {
    struct row {
        std::string_view roles;
        std::size_t stable;
    };
    const std::vector<row> rows = {
        {"su", 1}, {"suau", 3}, {"sa", 2}, {"u", 0}, {"s", 1}, {"suaut", 3}, {"sauaa", 2},
    };
    for (const auto& r : rows) {
        CAPTURE(r.roles);
        json body = {{"messages", json::array()}};
        for (char c : r.roles) {
            const char* role = c == 's'   ? "system"
                               : c == 'u' ? "user"
                               : c == 'a' ? "assistant"
                                          : "tool";
            body["messages"].push_back({{"role", role}, {"content", "x"}});
        }
        CHECK(chat_fp(body).stable_levels == r.stable);
    }
}

TEST_CASE("chat sizes: cumulative bytes and the longest message") {
    const auto fp = chat_fp(base_chat());
    const std::vector<std::uint64_t> expected = {14, 14 + 19, 14 + 19 + 5, 14 + 19 + 5 + 13};
    REQUIRE(fp.levels.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(fp.levels[i].bytes == expected[i]);
    CHECK(fp.total_bytes == expected.back());
    CHECK(fp.longest_segment_bytes == 19);
}

TEST_CASE("completion strings are cut into chunks") {
    struct row {
        std::size_t size;
        std::size_t levels;
        std::size_t stable;
    };
    const std::vector<row> rows = {{1, 1, 0},    {4095, 1, 0}, {4096, 1, 1},
                                   {4097, 2, 1}, {8192, 2, 2}, {10000, 3, 2}};
    for (const auto& r : rows) {
        CAPTURE(r.size);
        const auto fp = completion_fp({{"prompt", std::string(r.size, 'a')}});
        CHECK(fp.levels.size() == r.levels);
        CHECK(fp.stable_levels == r.stable);
        CHECK(fp.total_bytes == r.size);
        CHECK(fp.longest_segment_bytes == r.size);
        CHECK(fp.levels.front().bytes == std::min<std::size_t>(r.size, 4096));
    }
    std::string a(9000, 'a');
    std::string b = a;
    b[5000] = 'b';
    const auto fa = completion_fp({{"prompt", a}});
    CHECK(rt::common_levels(fa.levels, completion_fp({{"prompt", b}}).levels) == 1);
    CHECK(completion_fp({{"prompt", a}, {"n_predict", 5}}).levels == fa.levels);
    CHECK(rt::common_levels(fa.levels, completion_fp({{"prompt", a + "x"}}).levels) == 2);
    // a one-element array holding the string is the string
    CHECK(completion_fp({{"prompt", json::array({a})}}).levels == fa.levels);
}

TEST_CASE("completion token arrays are cut into chunks of ids") {
    json ids = json::array();
    for (int i = 0; i < 2500; ++i) ids.push_back(i);
    const auto fp = completion_fp({{"prompt", ids}});
    CHECK(fp.levels.size() == 3);
    CHECK(fp.stable_levels == 2);
    CHECK(fp.total_bytes == 2500 * 3);
    CHECK(fp.levels[0].bytes == 1024 * 3);
    CHECK(completion_fp({{"prompt", json::array({ids})}}).levels == fp.levels);
    ids[1500] = 7;
    CHECK(rt::common_levels(fp.levels, completion_fp({{"prompt", ids}}).levels) == 1);
    CHECK(completion_fp({{"prompt", {5}}}).levels.size() == 1);
    // ids built in code (signed) and parsed from the wire (unsigned) hash alike
    CHECK(completion_fp({{"prompt", {5, 4294967295u}}}).levels ==
          completion_fp(json::parse(R"({"prompt":[5,4294967295]})")).levels);
    // ids and the same digits as text are different prompts
    CHECK(completion_fp({{"prompt", {1}}}).levels != completion_fp({{"prompt", "1"}}).levels);
}

TEST_CASE("bodies that are not fingerprinted") {
    struct row {
        request_kind kind;
        std::string_view body;
    };
    const std::vector<row> rows = {
        {request_kind::chat, R"({"model":"m"})"},
        {request_kind::chat, R"({"messages":[]})"},
        {request_kind::chat, R"({"messages":{"role":"user"}})"},
        {request_kind::chat, R"({"messages":"hello"})"},
        {request_kind::chat, R"({"messages":[{"role":"user","content":"x"},"oops"]})"},
        {request_kind::chat, R"([{"role":"user","content":"x"}])"},
        {request_kind::chat, R"({"prompt":"a chat body needs messages"})"},
        {request_kind::completion, R"({"messages":[{"role":"user","content":"x"}]})"},
        {request_kind::completion, R"({"prompt":""})"},
        {request_kind::completion, R"({"prompt":[]})"},
        {request_kind::completion, R"({"prompt":[""]})"},
        {request_kind::completion, R"({"prompt":["a","b"]})"},
        {request_kind::completion, R"({"prompt":[[1,2],[3]]})"},
        {request_kind::completion, R"({"prompt":[1,"a",2]})"},
        {request_kind::completion, R"({"prompt":[1.5]})"},
        {request_kind::completion, R"({"prompt":[["a"]]})"},
        {request_kind::completion, R"({"prompt":[1,-2,3]})"},
        {request_kind::completion, R"({"prompt":[1,4294967296]})"},
        {request_kind::completion, R"({"prompt":[true]})"},
        {request_kind::completion, R"({"prompt":42})"},
        {request_kind::completion, R"({"prompt":null})"},
        {request_kind::completion, R"("just a string")"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.body);
        CHECK_FALSE(rt::fingerprint_request(r.kind, json::parse(r.body)).has_value());
    }
}

TEST_CASE("common_levels") {
    const std::vector<rt::prefix_level> a = {{1, 10}, {2, 20}, {3, 30}};
    CHECK(rt::common_levels(a, a) == 3);
    CHECK(rt::common_levels(a, {}) == 0);
    CHECK(rt::common_levels(a, {{1, 10}, {2, 20}}) == 2);
    CHECK(rt::common_levels(a, {{1, 10}, {9, 20}, {3, 30}}) == 1);
    CHECK(rt::common_levels(a, {{7, 10}, {2, 20}}) == 0);
}

TEST_CASE("the model field is copied out, and a non-string model is not copied") {
    CHECK(chat_fp(base_chat()).model == "qwen");
    const auto fp = chat_fp(with(base_chat(), "model", 3));
    CHECK(fp.model.empty());
    CHECK(fp.levels == chat_fp(base_chat()).levels);
}

TEST_CASE("completion headers hold only the adapters and the media") {
    const json base = {{"prompt", "Read this document."}, {"model", "m"}};
    const auto fp = rt::fingerprint_request(request_kind::completion, base);
    REQUIRE(fp.has_value());
    for (const auto& row : std::vector<std::pair<std::string, json>>{
             {"model", "other"}, {"n_predict", 3}, {"id_slot", 0}, {"tools", json::array()}}) {
        const std::string& key = row.first;
        CAPTURE(key);
        json body = base;
        body[key] = row.second;
        CHECK(rt::fingerprint_request(request_kind::completion, body)->levels == fp->levels);
    }
    for (const auto& row :
         std::vector<std::pair<std::string, json>>{{"lora", json::parse(R"([{"id":0,"scale":1}])")},
                                                   {"multimodal_data", json::array({"aGk="})}}) {
        const std::string& key = row.first;
        CAPTURE(key);
        json body = base;
        body[key] = row.second;
        CHECK(rt::common_levels(rt::fingerprint_request(request_kind::completion, body)->levels,
                                fp->levels) == 0);
    }
}

// Fingerprints are stored in the disk index, so the same body must give the same hashes in
// every build of one format version. Pinned values, computed once: a change to how they are
// computed must keep them, or bump fingerprint_format_version and update this table.
TEST_CASE("fingerprint values are pinned for the format version") {
    struct row {
        request_kind kind;
        std::string body;
        std::vector<std::uint64_t> hashes;
    };
    const std::vector<row> rows = {
        {request_kind::chat,
         R"({"model":"qwen","temperature":0.2,"messages":[{"role":"system","content":"You are terse."},)"
         R"({"role":"user","name":"ann","content":[{"type":"text","text":"Read "},{"type":"image_url",)"
         R"("image_url":{"url":"data:x"}},{"type":"text","text":"this é."}]},{"role":"assistant",)"
         R"("content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}],)"
         R"("reasoning_content":"hm"},{"role":"tool","tool_call_id":"c1","content":"42"}],)"
         R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","x":1.5}}}],)"
         R"("chat_template_kwargs":{"enable_thinking":false},"max_tokens":7,"stream":true})",
         {0x1d7ff2d0c8d9ac98ull, 0x32083602f1338b67ull, 0xa752f68301606732ull,
          0xa71a639da62f44c0ull}},
        {request_kind::chat,
         R"({"model":42,"messages":[{"role":"user","content":"hi"}]})",
         {0xb8b265c3e1a0ae2cull}},
        {request_kind::completion,
         R"({"prompt":"abc\ndef","n_predict":3,"lora":[{"id":0,"scale":0.5}]})",
         {0xe58c63127e677f00ull}},
        {request_kind::completion,
         R"({"prompt":[1,2,3,4294967295],"model":"m"})",
         {0xc13f77f732e1ab78ull}},
        {request_kind::chat,
         R"({"messages":[{"role":"system","content":")" + std::string(9000, 'q') + R"("}]})",
         {0x06140e4cad559becull}},
    };
    for (const auto& r : rows) {
        const auto fp = rt::fingerprint_request(r.kind, json::parse(r.body));
        REQUIRE(fp.has_value());
        std::vector<std::uint64_t> got;
        for (const auto& l : fp->levels) got.push_back(l.hash);
        CHECK(got == r.hashes);
    }
}

TEST_CASE("empty fields and texts hash without handing memcpy a null pointer") {
    // Every message hashes empty field markers, and an empty std::string_view's data() is null:
    // UBSan (tests/sanitizers.sh) fails this test if the hash passes that pointer on.
    const json body = {{"model", ""},
                       {"messages",
                        {{{"role", "user"}, {"content", ""}},
                         {{"role", "assistant"}, {"content", json::array()}},
                         {{"role", "user"}, {"content", "q"}}}}};
    const auto fp = chat_fp(body);
    CHECK(fp.levels.size() == 3);
    CHECK(fp.levels[0].hash != fp.levels[1].hash);
}
