// Pure request policy as tables: which endpoints are served and how, which headers cross the
// proxy, what a response says about the prompt cache, and the API key comparison.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/endpoints.hpp"
#include "api/forward_headers.hpp"
#include "api/timings.hpp"
#include "util/secrets.hpp"

namespace api = warmslot::api;
using api::endpoint_kind;

namespace {

struct route_case {
    std::string_view method;
    std::string_view target;
    endpoint_kind kind;
    bool needs_auth;
};

std::string_view kind_name(endpoint_kind k) {
    switch (k) {
        case endpoint_kind::forward_json: return "forward_json";
        case endpoint_kind::forward_get: return "forward_get";
        case endpoint_kind::health: return "health";
        case endpoint_kind::metrics: return "metrics";
        case endpoint_kind::not_found: return "not_found";
        case endpoint_kind::method_not_allowed: return "method_not_allowed";
        case endpoint_kind::slot_action: return "slot_action";
        case endpoint_kind::admin: return "admin";
        case endpoint_kind::explain: return "explain";
        case endpoint_kind::dashboard: return "dashboard";
    }
    return "?";
}

void check_routes(const std::vector<route_case>& cases) {
    for (const auto& c : cases) {
        CAPTURE(c.method);
        CAPTURE(c.target);
        const auto ep = api::classify(c.method, c.target);
        CHECK(kind_name(ep.kind) == kind_name(c.kind));
        CHECK(ep.needs_auth == c.needs_auth);
    }
}

constexpr std::string_view json_posts[] = {
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/v1/embeddings",
    "/embeddings",
    "/embedding",
    "/completion",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/responses",
    "/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/infill",
    "/rerank",
    "/reranking",
    "/v1/rerank",
    "/v1/reranking",
    "/v1/chat/completions/input_tokens",
    "/chat/completions/input_tokens",
    "/v1/responses/input_tokens",
    "/responses/input_tokens",
    "/v1/chat/completions/control",
};
constexpr std::string_view gets[] = {"/v1/models", "/models", "/props", "/slots", "/lora-adapters"};

}  // namespace

TEST_CASE("classify: every JSON endpoint is forwarded on POST only") {
    std::vector<route_case> cases;
    for (const auto path : json_posts) {
        cases.push_back({"POST", path, endpoint_kind::forward_json, true});
        for (const std::string_view m : {"GET", "PUT", "DELETE", "PATCH", "HEAD", "post"}) {
            cases.push_back({m, path, endpoint_kind::method_not_allowed, true});
        }
    }
    check_routes(cases);
}

TEST_CASE("classify: POST /warmslot/explain is warmslot's own, behind the API key") {
    check_routes({{"POST", "/warmslot/explain", endpoint_kind::explain, true},
                  {"POST", "/warmslot/explain?x=1", endpoint_kind::explain, true},
                  {"GET", "/warmslot/explain", endpoint_kind::method_not_allowed, true},
                  {"POST", "/warmslot/other", endpoint_kind::not_found, true}});
}

TEST_CASE("classify: GET /warmslot/... is the dashboard; only its data needs the API key") {
    check_routes({{"GET", "/warmslot/", endpoint_kind::dashboard, false},
                  {"GET", "/warmslot", endpoint_kind::dashboard, false},
                  {"GET", "/warmslot/dashboard.js?v=1", endpoint_kind::dashboard, false},
                  {"GET", "/warmslot/status", endpoint_kind::dashboard, true},
                  {"GET", "/warmslot/status?x=1", endpoint_kind::dashboard, true},
                  {"POST", "/warmslot/status", endpoint_kind::method_not_allowed, true},
                  {"POST", "/warmslot/", endpoint_kind::method_not_allowed, true},
                  {"DELETE", "/warmslot/anything", endpoint_kind::not_found, true}});
}

TEST_CASE("classify: every GET endpoint is forwarded on GET only") {
    std::vector<route_case> cases;
    for (const auto path : gets) {
        cases.push_back({"GET", path, endpoint_kind::forward_get, true});
        for (const std::string_view m : {"PUT", "DELETE", "HEAD", "get"}) {
            cases.push_back({m, path, endpoint_kind::method_not_allowed, true});
        }
    }
    for (const std::string_view path : {"/v1/models", "/models", "/props"}) {
        cases.push_back({"POST", path, endpoint_kind::method_not_allowed, true});
    }
    check_routes(cases);
}

TEST_CASE("classify: health needs no key, metrics does, slot actions are never forwarded") {
    check_routes({
        {"GET", "/metrics", endpoint_kind::metrics, true},
        {"GET", "/metrics?name=x", endpoint_kind::metrics, true},
        {"POST", "/metrics", endpoint_kind::method_not_allowed, true},
        {"GET", "/v1/metrics", endpoint_kind::not_found, true},
        {"GET", "/health", endpoint_kind::health, false},
        {"GET", "/v1/health", endpoint_kind::health, false},
        {"GET", "/health?verbose=1", endpoint_kind::health, false},
        {"POST", "/health", endpoint_kind::method_not_allowed, false},
        {"DELETE", "/v1/health", endpoint_kind::method_not_allowed, false},
        {"POST", "/slots/0?action=save", endpoint_kind::slot_action, true},
        {"POST", "/slots/1?action=restore", endpoint_kind::slot_action, true},
        {"POST", "/slots/0?action=erase", endpoint_kind::slot_action, true},
        {"GET", "/slots/0", endpoint_kind::slot_action, true},
        {"POST", "/slots", endpoint_kind::slot_action, true},
        {"POST", "/slots?id_slot=0", endpoint_kind::slot_action, true},
        {"PUT", "/slots", endpoint_kind::method_not_allowed, true},
    });
}

TEST_CASE("classify: admin endpoints are POST only and need a key") {
    check_routes({
        {"POST", "/admin/snapshot", endpoint_kind::admin, true},
        {"POST", "/admin/warm", endpoint_kind::admin, true},
        {"POST", "/admin/other", endpoint_kind::admin, true},
        {"GET", "/admin/snapshot", endpoint_kind::method_not_allowed, true},
        {"POST", "/admin", endpoint_kind::not_found, true},
    });
}

TEST_CASE("classify: the query string and fragment do not change the route") {
    check_routes({
        {"GET", "/slots?x=1", endpoint_kind::forward_get, true},
        {"GET", "/props#top", endpoint_kind::forward_get, true},
        {"POST", "/v1/chat/completions?stream=1", endpoint_kind::forward_json, true},
        {"GET", "/v1/chat/completions?x=1", endpoint_kind::method_not_allowed, true},
    });
}

TEST_CASE("classify: unknown paths are not found and still need a key") {
    check_routes({
        {"GET", "/", endpoint_kind::not_found, true},
        {"GET", "", endpoint_kind::not_found, true},
        {"POST", "/v1/chat/completions/", endpoint_kind::not_found, true},
        {"POST", "/V1/chat/completions", endpoint_kind::not_found, true},
        {"GET", "/healthz", endpoint_kind::not_found, true},
        {"GET", "/v2/models", endpoint_kind::not_found, true},
        {"POST", "//v1/completions", endpoint_kind::not_found, true},
    });
}

TEST_CASE("path_of strips the query and the fragment") {
    CHECK(api::path_of("/slots?x=1") == "/slots");
    CHECK(api::path_of("/a#b?c") == "/a");
    CHECK(api::path_of("/a?b#c") == "/a");
    CHECK(api::path_of("/plain") == "/plain");
    CHECK(api::path_of("?only") == "");
    CHECK(api::path_of("") == "");
}

TEST_CASE("forward_request_header: credentials, conversation id and hop-by-hop stay here") {
    const std::vector<std::string_view> dropped = {
        "X-Conversation-Id",
        "x-conversation-id",
        "X-CONVERSATION-ID",
        "Authorization",
        "authorization",
        "AUTHORIZATION",
        "X-Api-Key",
        "x-api-key",
        "X-API-KEY",
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "transfer-encoding",
        "Upgrade",
        "Host",
        "host",
        "Content-Length",
        "content-length",
        "Expect",
    };
    for (const auto name : dropped) {
        CAPTURE(name);
        CHECK_FALSE(api::forward_request_header(name));
    }
}

TEST_CASE("forward_request_header: ordinary headers pass") {
    const std::vector<std::string_view> kept = {
        "Content-Type",   "content-type", "Accept",          "ACCEPT",
        "User-Agent",     "X-Custom",     "Accept-Encoding", "X-Request-Id",
        "Authorization2", "X-Api-Keys",   "Conversation-Id", "Connectionx",
    };
    for (const auto name : kept) {
        CAPTURE(name);
        CHECK(api::forward_request_header(name));
    }
}

TEST_CASE("forward_response_header: hop-by-hop, framing and CORS are dropped, the rest kept") {
    for (const std::string_view name :
         {"Connection", "keep-alive", "Transfer-Encoding", "TRANSFER-ENCODING", "Upgrade",
          "Trailer", "TE", "Proxy-Authenticate", "Content-Length", "content-length", "Server",
          "Access-Control-Allow-Origin"}) {
        CAPTURE(name);
        CHECK_FALSE(api::forward_response_header(name));
    }
    for (const std::string_view name : {"Content-Type", "content-type", "X-Custom", "Cache-Control",
                                        "Date", "Authorization", "X-Conversation-Id"}) {
        CAPTURE(name);
        CHECK(api::forward_response_header(name));
    }
}

namespace {

struct expected_stats {
    long cached;
    long processed;
    long predicted;
    double prompt_ms = 0;
};

void check_stats(std::string_view json, expected_stats want) {
    CAPTURE(json);
    CHECK(api::may_carry_stats(json));
    const auto s = api::find_prompt_stats(json);
    REQUIRE(s.has_value());
    CHECK(s->cached == want.cached);
    CHECK(s->processed == want.processed);
    CHECK(s->predicted == want.predicted);
    CHECK(s->prompt_ms == doctest::Approx(want.prompt_ms));
}

}  // namespace

TEST_CASE("find_prompt_stats: llama-server chat completion body prefers timings over usage") {
    check_stats(R"({"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant",)"
                R"("content":"hi"}}],"created":1,"model":"m","object":"chat.completion",)"
                R"("usage":{"completion_tokens":4,"prompt_tokens":40,"total_tokens":44,)"
                R"("prompt_tokens_details":{"cached_tokens":1}},"id":"chatcmpl-x",)"
                R"("timings":{"cache_n":33,"prompt_n":7,"prompt_ms":12.5,)"
                R"("prompt_per_second":560.0,"predicted_n":4,"predicted_ms":3.1}})",
                {33, 7, 4, 12.5});
}

TEST_CASE("find_prompt_stats: OpenAI usage when there are no timings") {
    check_stats(R"({"object":"chat.completion","usage":{"prompt_tokens":20,)"
                R"("completion_tokens":3,"total_tokens":23,)"
                R"("prompt_tokens_details":{"cached_tokens":12}}})",
                {12, 8, 3});
    check_stats(R"({"usage":{"prompt_tokens":9,"completion_tokens":1}})", {0, 9, 1});
    // timings without prompt_n cannot be used: usage decides
    check_stats(R"({"timings":{"predicted_n":3},"usage":{"prompt_tokens":5,)"
                R"("prompt_tokens_details":{"cached_tokens":5}}})",
                {5, 0, 0});
}

TEST_CASE("find_prompt_stats: /completion final stop event") {
    check_stats(R"({"content":"","id_slot":0,"stop":true,"model":"m","tokens_predicted":8,)"
                R"("tokens_evaluated":30,"tokens_cached":38,"stop_type":"limit",)"
                R"("timings":{"cache_n":27,"prompt_n":3,"prompt_ms":1.25,"predicted_n":8}})",
                {27, 3, 8, 1.25});
}

TEST_CASE("find_prompt_stats: only the top-level objects count, the last duplicate wins") {
    // "timings" nested in a choice or as a string value is not the response's timings
    check_stats(R"({"choices":[{"timings":{"cache_n":1,"prompt_n":1}}],"note":"timings",)"
                R"("usage":{"prompt_tokens":6,"completion_tokens":2}})",
                {0, 6, 2});
    check_stats(R"({"timings":{"cache_n":1,"prompt_n":1},"timings":{"cache_n":4,"prompt_n":5}})",
                {4, 5, 0});
    check_stats(R"({"timings":{"cache_n":1,"prompt_n":2,"cache_n":3,"extra":{"prompt_n":9}}})",
                {3, 2, 0});
    check_stats(R"({"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},)"
                R"("prompt_tokens_details":null}})",
                {0, 9, 0});
    // numbers of another kind convert as json::value() converts them; other types read as 0
    check_stats(R"({"timings":{"cache_n":2.9,"prompt_n":"7","prompt_ms":3,"predicted_n":[1]}})",
                {2, 0, 0, 3.0});
}

TEST_CASE("find_prompt_stats: values of other top-level keys are checked, not read") {
    // The scan only checks the grammar under keys that cannot carry the stats: a nested
    // "timings" there does not count, and an error there still makes the text invalid.
    check_stats(R"({"choices":[{"timings":{"prompt_n":8},"x":[true,false,null,-1.5e3]}],)"
                R"("timings":{"prompt_n":3,"cache_n":1},"model":{"usage":{"prompt_tokens":4}}})",
                {1, 3, 0});
    CHECK_FALSE(api::find_prompt_stats(
                    R"({"x":{"timings":{"prompt_n":5}},"y":[{"usage":{"prompt_tokens":2}}]})")
                    .has_value());
    for (const char* invalid :
         {R"({"x":[1,2,],"timings":{"prompt_n":3}})", R"({"x":{"a" 1},"timings":{"prompt_n":3}})",
          R"({"x":"a\qb","timings":{"prompt_n":3}})", R"({"x":01,"timings":{"prompt_n":3}})",
          R"({"x":tru,"timings":{"prompt_n":3}})",
          "{\"x\":\"\x01\",\"timings\":{\"prompt_n\":3}}"}) {
        CAPTURE(invalid);
        CHECK_FALSE(api::find_prompt_stats(invalid).has_value());
    }
    // What the scan is unsure of (a 22-digit number) is read by nlohmann instead, alike.
    check_stats(R"({"x":1234567890123456789012,"timings":{"prompt_n":3,"cache_n":2}})", {2, 3, 0});
}

TEST_CASE("find_prompt_stats: escapes, exponents, unicode and deep nesting read alike") {
    check_stats(R"({"usage":null,"\u0074imings":{"prompt_n":3,"cache_n":1e1,"prompt_ms":2.5E-1}})",
                {10, 3, 0, 0.25});
    check_stats(R"({"content":"caf\u00e9 \"q\" \\ \n","timings":{"prompt_n":-2,"cache_n":0}})",
                {0, -2, 0});
    check_stats(
        "{\"content\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"timings\":{\"prompt_n\":4}}",
        {0, 4, 0});
    std::string deep = R"({"timings":{"prompt_n":5},"x":)";
    for (int i = 0; i < 100; ++i) deep += "[";
    for (int i = 0; i < 100; ++i) deep += "]";
    check_stats(deep + "}", {0, 5, 0});
}

TEST_CASE("find_prompt_stats: a special byte anywhere in a long string is seen") {
    // Strings are scanned eight bytes at a time: put each kind of byte at every offset.
    const std::vector<std::pair<std::string, bool>> bytes = {
        {"\\n", true},   {"\\\"", true},      {"\xc3\xa9", true}, {"\x7f", true}, {"\t", false},
        {"\x01", false}, {"\xc3\x28", false}, {"\xff", false},    {"\"", false},
    };
    for (const auto& [special, valid] : bytes) {
        for (std::size_t at = 0; at < 20; ++at) {
            const std::string content = std::string(at, 'a') + special + std::string(19 - at, 'b');
            const std::string json = R"({"content":")" + content + R"(","timings":{"prompt_n":4}})";
            CAPTURE(json);
            CHECK(api::find_prompt_stats(json).has_value() == valid);
        }
    }
}

TEST_CASE("may_carry_stats: the quoted keys anywhere, and nothing else") {
    const std::vector<std::pair<std::string_view, bool>> cases = {
        {R"("timings")", true},
        {R"("usage")", true},
        {R"(x"timings")", true},
        {R"({"a":"g","usage":{}})", true},
        {R"(gg"timings":{})", true},
        {R"(timings usage)", false},
        {R"("timing")", false},
        {R"("timings)", false},
        {R"(usage")", false},
        {R"("usag")", false},
        {"g", false},
        {"", false},
        {R"({"msg":"big egg"})", false},
        {R"("Timings")", false},
    };
    for (const auto& c : cases) {
        CAPTURE(c.first);
        CHECK(api::may_carry_stats(c.first) == c.second);
    }
}

TEST_CASE("find_prompt_stats: no stats") {
    const std::vector<std::string_view> none = {
        "",
        "not json",
        "[DONE]",
        R"({"timings":{"cache_n":5,"prompt_n":7})",  // cut short
        R"([{"timings":{"cache_n":5,"prompt_n":7}}])",
        R"({"choices":[{"delta":{"content":"tok"}}]})",
        R"({"timings":"soon","usage":null})",
        R"({"timings":{},"usage":{}})",
        R"({"timings":{"prompt_n":1},"timings":[]})",
        "{\"content\":\"\xc3\x28\",\"timings\":{\"prompt_n\":1}}",      // bad UTF-8
        "{\"content\":\"\xed\xa0\x80\",\"timings\":{\"prompt_n\":1}}",  // a surrogate
        "{\"content\":\"a\tb\",\"timings\":{\"prompt_n\":1}}",          // raw control char
        R"({"content":"\ud800","timings":{"prompt_n":1}})",             // lone surrogate escape
        R"({"timings":{"prompt_n":01}})",
        R"({"timings":{"prompt_n":1.}})",
        R"({"timings":{"prompt_n":1},})",
        R"({"timings":{"cache_n":5,"prompt_n":7}} trailing)",
        R"(42)",
    };
    for (const auto json : none) {
        CAPTURE(json);
        CHECK_FALSE(api::find_prompt_stats(json).has_value());
    }
    CHECK_FALSE(api::may_carry_stats(R"({"choices":[{"delta":{"content":"tok"}}]})"));
    CHECK_FALSE(api::may_carry_stats("[DONE]"));
    CHECK(api::may_carry_stats(R"({"usage":null})"));
}

TEST_CASE("matches_any_key") {
    using warmslot::util::matches_any_key;
    const std::vector<std::string> none;
    const std::vector<std::string> one = {"sk-secret"};
    const std::vector<std::string> several = {"alpha-key", "sk-secret", "b"};

    CHECK_FALSE(matches_any_key("sk-secret", none));
    CHECK_FALSE(matches_any_key("", none));

    CHECK(matches_any_key("sk-secret", one));
    CHECK_FALSE(matches_any_key("sk-secre", one));    // a prefix
    CHECK_FALSE(matches_any_key("sk-secret2", one));  // longer
    CHECK_FALSE(matches_any_key("sk-secreT", one));   // same length, last byte differs
    CHECK_FALSE(matches_any_key("Sk-secret", one));   // same length, first byte differs
    CHECK_FALSE(matches_any_key("x", one));           // different length
    CHECK_FALSE(matches_any_key("", one));
    CHECK_FALSE(matches_any_key(std::string_view("sk-secret\0", 10), one));  // trailing NUL

    CHECK(matches_any_key("alpha-key", several));
    CHECK(matches_any_key("sk-secret", several));
    CHECK(matches_any_key("b", several));
    CHECK_FALSE(matches_any_key("alpha", several));
    CHECK_FALSE(matches_any_key("bb", several));
    CHECK_FALSE(matches_any_key("sk-secretalpha-key", several));
}

TEST_CASE("classify: the API shape of each prompt-carrying endpoint, none for the others") {
    const std::vector<std::pair<std::string_view, api::api_shape>> cases = {
        {"/v1/chat/completions", api::api_shape::chat},
        {"/chat/completions?x=1", api::api_shape::chat},
        {"/completion", api::api_shape::completion},
        {"/v1/completions", api::api_shape::completion},
        {"/completions", api::api_shape::completion},
        {"/v1/responses", api::api_shape::responses},
        {"/responses", api::api_shape::responses},
        {"/v1/messages?beta=true", api::api_shape::messages},
        {"/v1/messages/count_tokens?beta=true", api::api_shape::none},
        {"/v1/embeddings", api::api_shape::none},
        {"/infill", api::api_shape::none},
        {"/tokenize", api::api_shape::none},
    };
    for (const auto& [path, shape] : cases) {
        const std::string_view target = path;
        CAPTURE(target);
        const auto ep = api::classify("POST", target);
        CHECK(ep.kind == endpoint_kind::forward_json);
        CHECK(api::name(ep.shape) == api::name(shape));
    }
    CHECK(api::classify("GET", "/v1/models").shape == api::api_shape::none);
}

TEST_CASE("classify: /v1/messages* answers warmslot's errors in the Anthropic dialect") {
    using api::error_dialect;
    const std::vector<std::pair<std::string_view, error_dialect>> cases = {
        {"/v1/messages", error_dialect::anthropic},
        {"/v1/messages?beta=true", error_dialect::anthropic},
        {"/v1/messages/count_tokens", error_dialect::anthropic},
        {"/v1/messages/unknown", error_dialect::anthropic},
        {"/v1/messagesx", error_dialect::openai},
        {"/v1/chat/completions", error_dialect::openai},
        {"/v1/responses", error_dialect::openai},
        {"/nothing", error_dialect::openai},
    };
    for (const auto& [path, dialect] : cases) {
        const std::string_view target = path;
        CAPTURE(target);
        for (const std::string_view m : {"GET", "POST"}) {
            CHECK((api::classify(m, target).dialect == dialect));
        }
    }
    // Known path, wrong method: still the endpoint's dialect.
    CHECK(api::classify("GET", "/v1/messages").kind == endpoint_kind::method_not_allowed);
}

TEST_CASE("classify: requests that would change every slot behind warmslot's back are refused") {
    check_routes({
        {"POST", "/lora-adapters", endpoint_kind::method_not_allowed, true},
        {"POST", "/props", endpoint_kind::method_not_allowed, true},
        {"GET", "/lora-adapters", endpoint_kind::forward_get, true},
    });
}
