// The keep-alive of streams held by warmslot: which requests get it and how often, the event of
// each API, and how an answer that cannot go into a started stream is reported there.
#include "api/keepalive.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "sse/parser.hpp"
#include "sse/writer.hpp"

using namespace std::chrono_literals;
using warmslot::api::api_shape;
using warmslot::api::error_dialect;

namespace {

// The events a client's SSE parser sees in `bytes`: name and data of each, comments skipped.
struct collected final : warmslot::sse::event_sink {
    std::string seen;
    void on_event(std::string_view name, std::string_view data, std::string_view) override {
        seen += std::string(name) + "|" + std::string(data) + ";";
    }
};

std::string events_in(const std::string& bytes) {
    collected c;
    warmslot::sse::parser p;
    p.feed(bytes, c);
    return c.seen;
}

}  // namespace

TEST_CASE("keepalive: which requests get it, and how often") {
    struct row {
        api_shape shape;
        const char* body;
        std::optional<std::chrono::milliseconds> want;
    };
    const row rows[] = {
        {api_shape::chat, R"({"stream":true})", 10s},
        {api_shape::messages, R"({"stream":true})", 10s},
        {api_shape::responses, R"({"stream":true})", 10s},
        {api_shape::completion, R"({"stream":true})", 10s},
        {api_shape::chat, R"({"stream":false})", std::nullopt},
        {api_shape::chat, R"({})", std::nullopt},
        {api_shape::chat, R"({"stream":"yes"})", std::nullopt},
        {api_shape::none, R"({"stream":true})", std::nullopt},
        {api_shape::chat, R"([1])", std::nullopt},
        // The request's own ping interval (seconds) shortens it, never lengthens it.
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":3})", 3s},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":2.5})", 2500ms},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":60})", 10s},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":-1})", 10s},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":0})", 10s},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":"5"})", 10s},
        {api_shape::chat, R"({"stream":true,"sse_ping_interval":1e300})", 10s},
    };
    for (const auto& r : rows) {
        INFO(r.body);
        CHECK(warmslot::api::stream_keepalive(r.shape, nlohmann::json::parse(r.body), 10s) ==
              r.want);
    }
}

TEST_CASE("keepalive: the events of each dialect are what its clients parse") {
    const auto openai = warmslot::api::keepalive_event(error_dialect::openai);
    CHECK(openai == ": ping\n\n");
    CHECK(events_in(openai).empty());  // a comment: no event at all
    const auto anthropic = warmslot::api::keepalive_event(error_dialect::anthropic);
    CHECK(anthropic == "event: ping\ndata: {\"type\": \"ping\"}\n\n");
    CHECK(events_in(anthropic) == "ping|{\"type\": \"ping\"};");
    CHECK(warmslot::sse::format_comment("") == ":\n\n");
    CHECK(warmslot::sse::format_named_event("error", "a\nb") ==
          "event: error\ndata: a\ndata: b\n\n");
}

TEST_CASE("keepalive: a backend's answer that cannot be relayed becomes one error event") {
    const std::string context =
        R"({"error":{"code":400,"message":"too long","type":"exceed_context_size_error","n_prompt_tokens":9}})";
    // OpenAI dialect: llama-server's own error object goes as it is.
    CHECK(warmslot::api::sse_error_of_answer(400, context, error_dialect::openai) ==
          "data: " + context + "\n\n");
    // Anthropic dialect: its error event, with the backend's message.
    CHECK(warmslot::api::sse_error_of_answer(400, context, error_dialect::anthropic) ==
          "event: error\ndata: "
          R"({"error":{"message":"too long","type":"invalid_request_error"},"type":"error"})"
          "\n\n");
    CHECK(warmslot::api::sse_error_of_answer(503, R"({"error":{"message":"Loading model"}})",
                                             error_dialect::anthropic)
              .find(R"("type":"overloaded_error")") != std::string::npos);
    // Not an error object, or a success without a stream: described, in the dialect's shape.
    const auto plain =
        warmslot::api::sse_error_of_answer(502, "<html>bad gateway</html>", error_dialect::openai);
    CHECK(events_in(plain).find(R"("code":502)") != std::string::npos);
    CHECK(plain.find("status 502") != std::string::npos);
    const auto ok =
        warmslot::api::sse_error_of_answer(200, R"({"choices":[]})", error_dialect::openai);
    CHECK(ok.find("status 200 and no event stream") != std::string::npos);
    CHECK(ok.starts_with("data: {\"error\":"));
}

TEST_CASE(
    "prompt progress: asked for by stream and return_progress, written as llama-server does") {
    namespace api = warmslot::api;
    const auto body = nlohmann::json::parse(R"({"stream": true, "return_progress": true})");
    CHECK(api::wants_prompt_progress(api_shape::chat, body));
    CHECK(api::wants_prompt_progress(api_shape::completion, body));
    CHECK_FALSE(api::wants_prompt_progress(api_shape::messages, body));
    CHECK_FALSE(
        api::wants_prompt_progress(api_shape::chat, nlohmann::json::parse(R"({"stream": true})")));
    CHECK_FALSE(api::wants_prompt_progress(
        api_shape::chat, nlohmann::json::parse(R"({"stream": false, "return_progress": true})")));
    CHECK_FALSE(api::wants_prompt_progress(
        api_shape::chat, nlohmann::json::parse(R"({"stream": true, "return_progress": 1})")));

    api::prompt_progress p{24122, 0, 30000, 1500};  // processed is capped at the total
    const auto chat = api::prompt_progress_event(api_shape::chat, p, "chatcmpl-1", "m", 1700000000);
    REQUIRE(chat.rfind("data: ", 0) == 0);
    REQUIRE(chat.size() > 8);
    CHECK(chat.substr(chat.size() - 2) == "\n\n");
    const auto j = nlohmann::json::parse(chat.substr(6));
    CHECK(j["object"] == "chat.completion.chunk");
    CHECK(j["choices"][0]["delta"]["role"] == "assistant");
    CHECK(j["choices"][0]["delta"]["content"].is_null());
    CHECK(j["choices"][0]["finish_reason"].is_null());
    CHECK(j["prompt_progress"]["total"] == 24122);
    CHECK(j["prompt_progress"]["processed"] == 24122);
    CHECK(j["prompt_progress"]["time_ms"] == 1500);
    const auto completion = api::prompt_progress_event(api_shape::completion, p, "x", "m", 0);
    const auto c = nlohmann::json::parse(completion.substr(6));
    CHECK(c["content"] == "");
    CHECK(c["stop"] == false);
    CHECK(c["prompt_progress"]["cache"] == 0);
}
