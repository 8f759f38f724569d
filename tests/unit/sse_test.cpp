// SSE parser and writer: tables of edge cases, real llama-server stream shapes fed split at every
// position, and the memory limit.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "sse/parser.hpp"
#include "sse/writer.hpp"

using warmslot::sse::event;
using warmslot::sse::format_data_event;
using warmslot::sse::parser;

namespace {

using events = std::vector<event>;

// Readable and unambiguous rendering, so a failed comparison shows what differs.
std::string escape(std::string_view s) {
    constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (u < 0x20 || u >= 0x7f || c == '\\' || c == '|' || c == ']') {
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 0xf];
        } else {
            out += c;
        }
    }
    return out;
}

std::string show(const events& list) {
    std::string out;
    for (const event& e : list) {
        out +=
            "[name=" + escape(e.name) + "|id=" + escape(e.id) + "|data=" + escape(e.data) + "]\n";
    }
    return out;
}

struct outcome {
    events got;
    bool failed = false;
};

outcome parse_chunks(const std::vector<std::string_view>& chunks,
                     std::size_t max = parser::default_max_event_bytes) {
    parser p{max};
    outcome result;
    for (const std::string_view chunk : chunks) p.feed(chunk, result.got);
    result.failed = p.failed();
    p.finish(result.got);
    return result;
}

events parse_whole(std::string_view stream) { return parse_chunks({stream}).got; }

event data_event(std::string data, std::string name = {}, std::string id = {}) {
    return event{std::move(name), std::move(data), std::move(id)};
}

// A string literal with its embedded NUL bytes.
template <std::size_t n>
std::string bytes_of(const char (&literal)[n]) {
    return std::string(literal, n - 1);
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (std::size_t pos = s.find(from); pos != std::string::npos;
         pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

// Feeds `stream` whole, in two chunks split at every position, one byte at a time and in random
// chunk sizes; every way must give the same events (and the same failed state) as the whole.
void check_split_invariance(std::string_view stream,
                            std::size_t max = parser::default_max_event_bytes) {
    const outcome whole = parse_chunks({stream}, max);
    for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
        const outcome two = parse_chunks({stream.substr(0, cut), stream.substr(cut)}, max);
        INFO("split at byte ", cut);
        REQUIRE(show(two.got) == show(whole.got));
        REQUIRE(two.failed == whole.failed);
    }
    std::vector<std::string_view> bytes;
    for (std::size_t i = 0; i < stream.size(); ++i) bytes.push_back(stream.substr(i, 1));
    const outcome single = parse_chunks(bytes, max);
    REQUIRE(show(single.got) == show(whole.got));
    REQUIRE(single.failed == whole.failed);

    std::mt19937 rng{12345};
    for (int round = 0; round < 50; ++round) {
        std::vector<std::string_view> chunks;
        for (std::size_t pos = 0; pos < stream.size();) {
            const std::size_t len = std::uniform_int_distribution<std::size_t>{1, 7}(rng);
            chunks.push_back(stream.substr(pos, len));
            pos += len;
        }
        const outcome random = parse_chunks(chunks, max);
        INFO("random round ", round);
        REQUIRE(show(random.got) == show(whole.got));
        REQUIRE(random.failed == whole.failed);
    }
}

// Payloads of an OpenAI-compatible chat stream as llama-server sends it: role chunk, content
// chunks (one with raw UTF-8, one with an escaped newline), the finish chunk, then usage and
// timings on the last event before [DONE].
const std::vector<std::string> chat_payloads = {
    R"({"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1735000000,"id":"chatcmpl-7Gx2","model":"tiny-qwen35","system_fingerprint":"b1-80fb11a","object":"chat.completion.chunk"})",
    R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":"こんにちは"}}],"created":1735000000,"id":"chatcmpl-7Gx2","model":"tiny-qwen35","system_fingerprint":"b1-80fb11a","object":"chat.completion.chunk"})",
    R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":" line\nnext: \"q\""}}],"created":1735000000,"id":"chatcmpl-7Gx2","model":"tiny-qwen35","system_fingerprint":"b1-80fb11a","object":"chat.completion.chunk"})",
    R"({"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1735000001,"id":"chatcmpl-7Gx2","model":"tiny-qwen35","system_fingerprint":"b1-80fb11a","object":"chat.completion.chunk"})",
    R"({"choices":[],"created":1735000001,"id":"chatcmpl-7Gx2","model":"tiny-qwen35","system_fingerprint":"b1-80fb11a","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":7243,"total_tokens":7246,"prompt_tokens_details":{"cached_tokens":7239}},"timings":{"cache_n":7239,"prompt_n":4,"prompt_ms":6.42,"prompt_per_second":623.05,"predicted_n":3,"predicted_ms":11.9,"predicted_per_second":252.1}})",
    "[DONE]",
};

// A native /completion stream: no [DONE]; timings ride on the final stop:true event.
const std::vector<std::string> completion_payloads = {
    R"({"index":0,"content":"The","tokens":[],"stop":false,"id_slot":-1,"tokens_predicted":1,"tokens_evaluated":29})",
    R"({"index":0,"content":" cat:","tokens":[],"stop":false,"id_slot":-1,"tokens_predicted":2,"tokens_evaluated":29})",
    R"({"index":0,"content":"","tokens":[],"id_slot":1,"stop":true,"model":"tiny-llama","tokens_predicted":2,"tokens_evaluated":29,"has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":30,"timings":{"cache_n":25,"prompt_n":4,"prompt_ms":3.1,"prompt_per_second":1290.3,"predicted_n":2,"predicted_ms":7.7,"predicted_per_second":259.7}})",
};

// An error llama-server streams after the headers were sent.
const std::vector<std::string> error_payloads = {
    R"({"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"object":"chat.completion.chunk"})",
    R"({"error":{"code":500,"message":"Input prompt is too big compared to KV size.","type":"server_error"}})",
};

std::string frame_all(const std::vector<std::string>& payloads) {
    std::string stream;
    for (const std::string& p : payloads) stream += "data: " + p + "\n\n";
    return stream;
}

events expect_data(const std::vector<std::string>& payloads) {
    events list;
    for (const std::string& p : payloads) list.push_back(data_event(p));
    return list;
}

// Hand-written stream exercising everything else: a BOM, comments (keep-alives), named events,
// ids, multi-line data, fields without a colon, retry, and all three line endings mixed.
const std::string mixed_stream =
    "\xEF\xBB\xBF: keep-alive\n"
    "retry: 1000\n"
    "event: progress\r\n"
    "id: 41\r\n"
    "data: {\"n_past\":128}\r\n"
    "\r\n"
    ":\r"
    "data: first line\r"
    "data:second line without space\r"
    "data:  two spaces keep one\r"
    "\r"
    "data\n"
    "\n"
    "event: ignored-without-data\n"
    "\n"
    "id\n"
    "data: {\"a\":\"b:c\"}\r\n"
    ": trailing comment\r\n"
    "\r\n"
    "data: cut off at the end";

const events mixed_expected = {
    data_event(R"({"n_past":128})", "progress", "41"),
    data_event("first line\nsecond line without space\n two spaces keep one", "", "41"),
    data_event("", "", "41"),
    data_event(R"({"a":"b:c"})", "", ""),
};

}  // namespace

TEST_CASE("sse: llama-server streams give the same events however they are split") {
    struct stream_case {
        const char* label;
        std::string stream;
        events expected;
    };
    const std::string chat = frame_all(chat_payloads);
    const std::string completion = frame_all(completion_payloads);
    const std::vector<stream_case> cases = {
        {"chat, LF", chat, expect_data(chat_payloads)},
        {"chat, CRLF", replace_all(chat, "\n", "\r\n"), expect_data(chat_payloads)},
        {"chat, CR", replace_all(chat, "\n", "\r"), expect_data(chat_payloads)},
        {"/completion, LF", completion, expect_data(completion_payloads)},
        {"/completion, CRLF", replace_all(completion, "\n", "\r\n"),
         expect_data(completion_payloads)},
        {"streamed error", frame_all(error_payloads), expect_data(error_payloads)},
        {"mixed", mixed_stream, mixed_expected},
    };
    for (const stream_case& c : cases) {
        INFO(c.label);
        REQUIRE(show(parse_whole(c.stream)) == show(c.expected));
        check_split_invariance(c.stream);
    }
}

TEST_CASE("sse: the last chat event before [DONE] carries timings") {
    const events got = parse_whole(frame_all(chat_payloads));
    REQUIRE(got.size() == chat_payloads.size());
    CHECK(got.back().data == "[DONE]");
    CHECK(got[got.size() - 2].data.find("\"timings\":{\"cache_n\":7239") != std::string::npos);
}

TEST_CASE("sse: parser edge cases") {
    struct edge_case {
        const char* label;
        std::string input;
        events expected;
    };
    const std::vector<edge_case> cases = {
        {"one event", "data: a\n\n", {data_event("a")}},
        {"no space after colon", "data:a\n\n", {data_event("a")}},
        {"only one space stripped", "data:  a \n\n", {data_event(" a ")}},
        {"tab is not stripped", "data:\ta\n\n", {data_event("\ta")}},
        {"lines joined with LF", "data: a\ndata: b\n\n", {data_event("a\nb")}},
        {"field without colon", "data\n\n", {data_event("")}},
        {"empty data is an event", "data:\n\n", {data_event("")}},
        {"two empty data lines", "data:\ndata:\n\n", {data_event("\n")}},
        {"only the first colon splits", "data: x:y: z\n\n", {data_event("x:y: z")}},
        {"no blank line, no event", "data: a\n", {}},
        {"comment only", ": hello\n\n", {}},
        {"bare colon comment", ":\n\n", {}},
        {"comment inside an event", "data: a\n: ping\ndata: b\n\n", {data_event("a\nb")}},
        {"extra blank lines", "\n\ndata: a\n\n\n\n", {data_event("a")}},
        {"event without data is dropped and its name reset",
         "event: x\n\ndata: y\n\n",
         {data_event("y")}},
        {"named event", "event: update\ndata: z\n\n", {data_event("z", "update")}},
        {"last event name wins", "event: a\nevent: b\ndata: z\n\n", {data_event("z", "b")}},
        {"id persists",
         "id: 7\ndata: a\n\ndata: b\n\n",
         {data_event("a", "", "7"), data_event("b", "", "7")}},
        {"empty id resets",
         "id: 7\ndata: a\n\nid\ndata: b\n\n",
         {data_event("a", "", "7"), data_event("b")}},
        {"id with NUL ignored",
         bytes_of("id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\n"),
         {data_event("a", "", "1"), data_event("b", "", "1")}},
        {"id set without data survives", "id: 9\n\ndata: a\n\n", {data_event("a", "", "9")}},
        {"retry and unknown fields ignored", "retry: 10\nfoo: bar\ndata: a\n\n", {data_event("a")}},
        {"field names are case-sensitive", "Data: a\n\n", {}},
        {"space before colon is part of the name", "data : a\n\n", {}},
        {"leading space is part of the name", " data: a\n\n", {}},
        {"CR only", "data: a\r\rdata: b\r\r", {data_event("a"), data_event("b")}},
        {"CRLF", "data: a\r\ndata: b\r\n\r\n", {data_event("a\nb")}},
        {"LF then CRLF", "data: a\n\r\n", {data_event("a")}},
        {"CRLF then LF", "data: a\r\n\n", {data_event("a")}},
        {"LF CR is two endings", "data: a\n\rdata: b\n\n", {data_event("a"), data_event("b")}},
        {"NUL in data kept", bytes_of("data: a\0b\n\n"), {data_event(bytes_of("a\0b"))}},
        {"UTF-8 kept as is", "data: 日本語のテキスト\n\n", {data_event("日本語のテキスト")}},
        {"BOM at start ignored",
         "\xEF\xBB\xBF"
         "data: a\n\n",
         {data_event("a")}},
        {"only one BOM ignored",
         "\xEF\xBB\xBF\xEF\xBB\xBF"
         "data: a\n\n",
         {}},
        {"BOM later is data",
         "data: a\n\n\xEF\xBB\xBF"
         "data: b\n\n",
         {data_event("a")}},
        {"BOM before a comment", "\xEF\xBB\xBF: c\ndata: a\n\n", {data_event("a")}},
        {"empty input", "", {}},
    };
    for (const edge_case& c : cases) {
        INFO(c.label);
        CHECK(show(parse_whole(c.input)) == show(c.expected));
        check_split_invariance(c.input);
    }
}

TEST_CASE("sse: a CR at the end of one chunk and an LF at the start of the next are one ending") {
    parser p;
    events got;
    p.feed("data: a\r", got);
    p.feed("\ndata: b\r", got);
    p.feed("\n\r", got);
    REQUIRE(show(got) == show({data_event("a\nb")}));
    p.feed("\n", got);  // belongs to the blank line's "\r\n": no second dispatch, nothing pending
    CHECK(got.size() == 1);
    CHECK_FALSE(p.pending());
}

TEST_CASE("sse: finish discards an unterminated event and resets the parser") {
    parser p;
    events got;
    p.feed("id: 3\ndata: complete\n\nevent: e\ndata: partial\n", got);
    REQUIRE(got.size() == 1);
    CHECK(p.pending());
    p.finish(got);
    CHECK(got.size() == 1);
    CHECK_FALSE(p.pending());

    p.feed("data: next stream\n\n", got);  // the id and name from before do not leak
    REQUIRE(got.size() == 2);
    CHECK(show({got[1]}) == show({data_event("next stream")}));

    p.feed("data: cut inside the line", got);
    CHECK(p.pending());
    p.finish(got);
    CHECK(got.size() == 2);

    p.feed(": cut inside a comment", got);
    CHECK(p.pending());
    p.feed("\n", got);
    CHECK_FALSE(p.pending());
}

TEST_CASE("sse: memory limit") {
    SUBCASE("a line exactly at the limit fits, one byte more fails") {
        const std::string at = "data: 0123456789";  // 16 bytes
        CHECK(show(parse_chunks({at + "\n\n"}, 16).got) == show({data_event("0123456789")}));
        const outcome over = parse_chunks({at + "X\n\n"}, 16);
        CHECK(over.failed);
        CHECK(over.got.empty());
        check_split_invariance(at + "\n\n", 16);
        check_split_invariance(at + "X\n\n", 16);
    }
    SUBCASE("data accumulated over several lines counts") {
        const std::string stream = "data: 0123456789\ndata: 0123456789\n\n";
        const outcome o = parse_chunks({stream}, 20);
        CHECK(o.failed);
        CHECK(o.got.empty());
        check_split_invariance(stream, 20);
    }
    SUBCASE("the limit is per event") {
        std::string stream;
        for (int i = 0; i < 100; ++i) stream += "data: 0123456789\n\n";
        const outcome o = parse_chunks({stream}, 16);
        CHECK_FALSE(o.failed);
        CHECK(o.got.size() == 100);
    }
    SUBCASE("comments are skipped, not buffered") {
        const std::string stream = ": " + std::string(1000, 'c') + "\ndata: a\n\n";
        const outcome o = parse_chunks({stream}, 16);
        CHECK_FALSE(o.failed);
        CHECK(show(o.got) == show({data_event("a")}));
        check_split_invariance(stream, 16);
    }
    SUBCASE("events before the overflow are kept, nothing after it") {
        const std::string stream = "data: a\n\ndata: " + std::string(100, 'x') + "\n\ndata: b\n\n";
        const outcome o = parse_chunks({stream}, 32);
        CHECK(o.failed);
        CHECK(show(o.got) == show({data_event("a")}));
        check_split_invariance(stream, 32);
    }
    SUBCASE("a failed parser ignores input until finish") {
        parser p{8};
        events got;
        p.feed("data: too long\n\n", got);
        REQUIRE(p.failed());
        CHECK_FALSE(p.pending());
        p.feed("data: a\n\n", got);
        CHECK(got.empty());
        p.finish(got);
        CHECK_FALSE(p.failed());
        p.feed("data: a\n\n", got);
        CHECK(show(got) == show({data_event("a")}));
    }
    SUBCASE("a large event under the default limit") {
        const std::string big(std::size_t{1} << 20, 'z');
        const std::string stream = "data: " + big + "\n\n";
        std::vector<std::string_view> chunks;
        for (std::size_t pos = 0; pos < stream.size(); pos += 4096) {
            chunks.push_back(std::string_view{stream}.substr(pos, 4096));
        }
        const outcome o = parse_chunks(chunks);
        CHECK_FALSE(o.failed);
        REQUIRE(o.got.size() == 1);
        CHECK(o.got[0].data == big);
    }
}

TEST_CASE("sse: format_data_event") {
    struct write_case {
        std::string payload;
        std::string framed;
        std::string parsed;  // what a parser reassembles
    };
    const std::vector<write_case> cases = {
        {R"({"a":1})", "data: {\"a\":1}\n\n", R"({"a":1})"},
        {"[DONE]", "data: [DONE]\n\n", "[DONE]"},
        {"", "data: \n\n", ""},
        {"a\nb", "data: a\ndata: b\n\n", "a\nb"},
        {"a\r\nb\rc", "data: a\ndata: b\ndata: c\n\n", "a\nb\nc"},
        {"a\n", "data: a\ndata: \n\n", "a\n"},
        {"\n\n", "data: \ndata: \ndata: \n\n", "\n\n"},
        {" x", "data:  x\n\n", " x"},
        {"日本語", "data: 日本語\n\n", "日本語"},
    };
    for (const write_case& c : cases) {
        INFO(escape(c.payload));
        const std::string framed = format_data_event(c.payload);
        CHECK(framed == c.framed);
        CHECK(show(parse_whole(framed)) == show({data_event(c.parsed)}));
    }
}
