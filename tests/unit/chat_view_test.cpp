// The chat view of Responses and Messages bodies (the conversions llama-server makes before it
// renders them), what a view fingerprints like, the Anthropic error dialect, the usage fields of
// both APIs, and floating tickets (requests llama-server places itself).
#include "api/chat_view.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "api/errors.hpp"
#include "api/timings.hpp"
#include "routing/fingerprint.hpp"
#include "routing/registry.hpp"

namespace api = warmslot::api;
namespace routing = warmslot::routing;
using nlohmann::json;

namespace {

json view(api::api_shape shape, const json& body) {
    auto v = api::to_chat_view(shape, body);
    REQUIRE(v);
    return v->body;
}

routing::fingerprint chat_fp(const json& chat) {
    auto fp = routing::fingerprint_request(routing::request_kind::chat, chat);
    REQUIRE(fp);
    return *fp;
}

}  // namespace

TEST_CASE(
    "chat_view: Anthropic system blocks, tools and tool turns become the chat llama-server "
    "renders") {
    const json body = json::parse(R"({
      "model": "m", "max_tokens": 64, "temperature": 0.5, "stream": true,
      "system": [{"type": "text", "text": "You are. "}, {"type": "text", "text": "Be brief.",
                  "cache_control": {"type": "ephemeral"}}],
      "tools": [{"name": "get", "description": "d", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "any"},
      "messages": [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"},
                                          {"type": "text", "text": "calling"},
                                          {"type": "tool_use", "id": "t1", "name": "get", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}]},
                                     {"type": "text", "text": "and?"}]}
      ]})");
    const json v = view(api::api_shape::messages, body);
    const json expected = json::parse(R"({
      "model": "m",
      "messages": [
        {"role": "system", "content": "You are. Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": [{"type": "text", "text": "calling"}],
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}}],
         "reasoning_content": "hmm"},
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
        {"role": "tool", "tool_call_id": "t1", "content": "42"}
      ],
      "tools": [{"type": "function", "function": {"name": "get", "description": "d",
                                                   "parameters": {"type": "object"}}}],
      "tool_choice": "required"})");
    CHECK(v == expected);
}

TEST_CASE("chat_view: the billing header's per-request hash is normalized as llama-server does") {
    std::string a = "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are a CLI.";
    std::string b = "x-anthropic-billing-header: cc_version=2.1; cch=09f1c;You are a CLI.";
    api::normalize_billing_header(a);
    api::normalize_billing_header(b);
    CHECK(a == "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are a CLI.");
    CHECK(a == b);
    std::string other = "plain system text cch=12345;";
    api::normalize_billing_header(other);
    CHECK(other == "plain system text cch=12345;");
    std::string cut = "x-anthropic-billing-header: cch=12";  // too short: left alone
    api::normalize_billing_header(cut);
    CHECK(cut == "x-anthropic-billing-header: cch=12");

    // Two requests that differ only in that hash fingerprint the same.
    const auto request = [](std::string cch) {
        return json{{"model", "m"},
                    {"system",
                     {{{"type", "text"},
                       {"text", "x-anthropic-billing-header: cc=1; cch=" + cch + ";Sys"}}}},
                    {"messages", {{{"role", "user"}, {"content", "q"}}}}};
    };
    CHECK(chat_fp(view(api::api_shape::messages, request("aaaaa"))).levels ==
          chat_fp(view(api::api_shape::messages, request("bbbbb"))).levels);
}

TEST_CASE("chat_view: Responses instructions and input items become chat messages") {
    const json body = json::parse(R"({
      "model": "m", "instructions": "Be exact.", "max_output_tokens": 9, "reasoning": {"effort": "low"},
      "tools": [{"type": "function", "name": "f", "parameters": {}}, {"type": "web_search"}],
      "input": [
        {"role": "user", "content": "first"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"role": "user", "content": [{"type": "input_text", "text": "next"}]}
      ]})");
    const json v = view(api::api_shape::responses, body);
    const json expected = json::parse(R"({
      "model": "m", "reasoning_effort": "low",
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}, "strict": true}}],
      "messages": [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": [{"text": "first", "type": "text"}]},
        {"role": "assistant", "content": [{"text": "ok", "type": "text"}],
         "tool_calls": [{"function": {"arguments": "{}", "name": "f"}, "id": "c1", "type": "function"}]},
        {"role": "tool", "content": "done", "tool_call_id": "c1"},
        {"role": "user", "content": [{"text": "next", "type": "text"}]}
      ]})");
    CHECK(v == expected);
}

TEST_CASE(
    "chat_view: a string input and a string instructions; what llama-server refuses has no view") {
    const json v =
        view(api::api_shape::responses, {{"model", "m"}, {"instructions", "sys"}, {"input", "q"}});
    CHECK(v["messages"] ==
          json::parse(R"([{"role":"system","content":"sys"},{"role":"user","content":"q"}])"));
    CHECK_FALSE(api::to_chat_view(api::api_shape::responses, {{"model", "m"}}));
    CHECK_FALSE(api::to_chat_view(api::api_shape::responses,
                                  {{"input", "q"}, {"previous_response_id", "r1"}}));
    CHECK_FALSE(api::to_chat_view(api::api_shape::responses, {{"input", 5}}));
    CHECK_FALSE(
        api::to_chat_view(api::api_shape::responses, {{"input", {{{"type", "nonsense"}}}}}));
    CHECK_FALSE(api::to_chat_view(api::api_shape::responses, {{"input", "q"}, {"tools", "x"}}));
    CHECK_FALSE(api::to_chat_view(api::api_shape::messages, {{"system", "s"}}));
    CHECK_FALSE(api::to_chat_view(api::api_shape::messages, json::array()));
    CHECK_FALSE(api::to_chat_view(api::api_shape::chat, {{"messages", json::array()}}));
}

TEST_CASE(
    "chat_view: the same conversation as Messages, Responses and chat shares its fingerprint") {
    const std::string doc(3000, 'd');
    const json chat = {
        {"model", "m"},
        {"messages",
         {{{"role", "system"}, {"content", doc}}, {{"role", "user"}, {"content", "q"}}}}};
    const json messages = {{"model", "m"},
                           {"max_tokens", 5},
                           {"system", doc},
                           {"messages", {{{"role", "user"}, {"content", "q"}}}}};
    const json responses = {{"model", "m"}, {"instructions", doc}, {"input", "q"}};
    const auto a = chat_fp(chat);
    const auto b = chat_fp(view(api::api_shape::messages, messages));
    const auto c = chat_fp(view(api::api_shape::responses, responses));
    CHECK(a.levels == b.levels);
    CHECK(a.levels == c.levels);
    CHECK(b.stable_levels == 1);
    // A new question keeps the stable level; other tools do not.
    json other = messages;
    other["messages"][0]["content"] = "another question";
    CHECK(routing::common_levels(b.levels, chat_fp(view(api::api_shape::messages, other)).levels) ==
          1);
    other["tools"] = json::array({{{"name", "t"}}});
    CHECK(routing::common_levels(b.levels, chat_fp(view(api::api_shape::messages, other)).levels) ==
          0);
}

TEST_CASE("errors: the Anthropic dialect") {
    const auto body = json::parse(
        api::error_body(api::error_kind::unauthorized, "no key", api::error_dialect::anthropic));
    CHECK(body ==
          json::parse(
              R"({"type":"error","error":{"type":"authentication_error","message":"no key"}})"));
    CHECK(json::parse(api::error_body(api::error_kind::backend_unavailable, "m",
                                      api::error_dialect::anthropic))["error"]["type"] ==
          "overloaded_error");
    CHECK(json::parse(api::error_body(api::error_kind::payload_too_large, "m",
                                      api::error_dialect::anthropic))["error"]["type"] ==
          "request_too_large");
    for (const auto kind : api::all_error_kinds) {
        const auto b = json::parse(api::error_body(kind, "x", api::error_dialect::anthropic));
        CHECK(b["type"] == "error");
        CHECK_FALSE(b["error"]["type"].get<std::string>().empty());
    }
    const std::string event = api::sse_error_event(api::error_kind::upstream_timeout, "late",
                                                   api::error_dialect::anthropic);
    CHECK(event.starts_with("event: error\ndata: {\"error\":"));
    CHECK(event.ends_with("}\n\n"));
    CHECK(api::sse_error_event(api::error_kind::upstream_timeout, "late").starts_with("data: {"));
}

TEST_CASE("find_prompt_stats: Anthropic and Responses usage") {
    // Anthropic, whole answer: input_tokens are the computed ones.
    auto s = api::find_prompt_stats(
        R"({"type":"message","usage":{"cache_read_input_tokens":900,"input_tokens":30,"output_tokens":4}})");
    REQUIRE(s);
    CHECK(s->cached == 900);
    CHECK(s->processed == 30);
    CHECK(s->predicted == 4);
    // Anthropic stream: inside message_start's message; message_delta's usage carries none.
    s = api::find_prompt_stats(
        R"({"type":"message_start","message":{"id":"x","usage":{"cache_read_input_tokens":7,"input_tokens":3,"output_tokens":0}}})");
    REQUIRE(s);
    CHECK(s->cached == 7);
    CHECK(s->processed == 3);
    CHECK_FALSE(api::find_prompt_stats(R"({"type":"message_delta","usage":{"output_tokens":12}})"));
    // Responses: input_tokens are all of them.
    s = api::find_prompt_stats(
        R"({"object":"response","usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":60},"output_tokens":2}})");
    REQUIRE(s);
    CHECK(s->cached == 60);
    CHECK(s->processed == 40);
    s = api::find_prompt_stats(
        R"({"type":"response.completed","response":{"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0}}}})");
    REQUIRE(s);
    CHECK(s->processed == 10);
}

TEST_CASE("registry: a floating request keeps every slot of its backend from being pinned") {
    routing::registry reg({"b"}, routing::planner_settings{});
    routing::backend_info info;
    info.total_slots = 2;
    info.model_path = "m.gguf";
    reg.set_info(0, info, true);
    reg.set_healthy(0, true);
    const auto fp_of = [](char c) {
        const json body = {{"messages",
                            {{{"role", "system"}, {"content", std::string(6000, c)}},
                             {{"role", "user"}, {"content", "q"}}}}};
        return *routing::fingerprint_request(routing::request_kind::chat, body);
    };
    const auto a = fp_of('a'), b = fp_of('b');
    auto t = reg.reserve(&a, "", a.total_bytes, routing::clock::now());
    REQUIRE(t.p.slot);
    reg.mark_floating(t);
    CHECK(t.floating);
    // The other slot looks idle to warmslot, but llama-server may have put the request there.
    const auto other = reg.reserve(&b, "", b.total_bytes, routing::clock::now());
    CHECK_FALSE(other.p.slot);
    reg.cancel(other);
    // It reused the prefix prepared for it: the planned slot holds the whole prompt now.
    reg.complete(t, &a, api::prompt_stats{1900, 100, 2, 100}, routing::clock::now());
    auto hit = reg.reserve(&a, "", a.total_bytes, routing::clock::now());
    REQUIRE(hit.p.slot);
    CHECK(*hit.p.slot == *t.p.slot);
    CHECK(hit.p.matched_levels == 2);
    reg.complete(hit, &a, api::prompt_stats{1999, 1, 2, 1}, routing::clock::now());
    CHECK(reg.preview(&b, "", routing::clock::now()).slot);  // nothing floats any more
    hit = reg.reserve(&a, "", a.total_bytes, routing::clock::now());
    REQUIRE(hit.p.slot);
    CHECK(hit.p.matched_levels == 2);
    reg.mark_floating(hit);
    // It reused nothing: llama-server may have chosen another slot. Believed on the planned one
    // until GET /slots shows that slot with another token count.
    reg.complete(hit, &a, api::prompt_stats{0, 2000, 2, 100}, routing::clock::now());
    const auto planned = static_cast<std::size_t>(*t.p.slot);
    auto views = reg.snapshot();
    CHECK(views[0].slots[planned].held.size() == 2);
    CHECK(views[0].slots[planned].held_tokens == 2001);
    const auto seen = [&](std::uint64_t tokens) {
        std::vector<routing::observed_slot> slots(2);
        for (int id = 0; id < 2; ++id) slots[static_cast<std::size_t>(id)].id = id;
        slots[planned].n_prompt_tokens = tokens;
        reg.reconcile(0, slots, routing::clock::now());
        return reg.snapshot()[0].slots[planned];
    };
    CHECK(seen(2001).held.size() == 2);  // it ran there
    CHECK(seen(7).held.empty());         // it ran elsewhere
}

TEST_CASE("chat_view: the last cache_control breakpoint before the final user turn") {
    const json cc = {{"type", "ephemeral"}};
    json body = {
        {"model", "m"},
        {"system", json::array({{{"type", "text"}, {"text", "S"}, {"cache_control", cc}}})},
        {"messages", json::array({{{"role", "user"}, {"content", "q1"}},
                                  {{"role", "assistant"}, {"content", "a1"}},
                                  {{"role", "user"}, {"content", "q2"}}})}};
    auto v = api::to_chat_view(api::api_shape::messages, body);
    REQUIRE(v);
    CHECK(v->breakpoint == std::optional<std::size_t>(1));  // after the system message
    // A marked block in an earlier user turn that also carries a tool result (two view messages).
    body["messages"][0]["content"] =
        json::array({{{"type", "tool_result"}, {"tool_use_id", "t"}, {"content", "r"}},
                     {{"type", "text"}, {"text", "q1"}, {"cache_control", cc}}});
    v = api::to_chat_view(api::api_shape::messages, body);
    REQUIRE(v);
    CHECK(v->breakpoint == std::optional<std::size_t>(3));  // system, user text, tool result
    // The final user turn's own breakpoint does not count.
    body["messages"][2]["content"] =
        json::array({{{"type", "text"}, {"text", "q2"}, {"cache_control", cc}}});
    v = api::to_chat_view(api::api_shape::messages, body);
    CHECK(v->breakpoint == std::optional<std::size_t>(3));
    body.erase("system");
    body["messages"][0]["content"] = "q1";
    v = api::to_chat_view(api::api_shape::messages, body);
    CHECK_FALSE(v->breakpoint);
    CHECK_FALSE(api::to_chat_view(api::api_shape::responses, {{"input", "q"}})->breakpoint);
}

TEST_CASE("find_prompt_stats: a count beyond long's range reads as the default") {
    // Converting 1e300 to long is undefined behaviour: a backend's garbage must not reach it.
    auto s =
        api::find_prompt_stats(R"({"timings":{"cache_n":1e300,"prompt_n":5,"predicted_n":-1e19}})");
    REQUIRE(s);
    CHECK(s->cached == 0);
    CHECK(s->processed == 5);
    CHECK(s->predicted == 0);
    s = api::find_prompt_stats(R"({"usage":{"prompt_tokens":2.5e18,"completion_tokens":1}})");
    REQUIRE(s);
    CHECK(s->processed == 0);
    // processed = prompt - cached must not overflow either.
    s = api::find_prompt_stats(
        R"({"usage":{"prompt_tokens":-9000000000000000000,"prompt_tokens_details":{"cached_tokens":9000000000000000000}}})");
    REQUIRE(s);
    CHECK(s->processed == 0);
    s = api::find_prompt_stats(
        R"({"usage":{"input_tokens":-9000000000000000000,"input_tokens_details":{"cached_tokens":9e300}}})");
    REQUIRE(s);
    CHECK(s->cached == 0);
    CHECK(s->processed == 0);
}
