// The rewrite rules as tables: volatile lines, document order, edits as revision notes, turn
// notes, and the memory they read. Japanese text and array-of-parts contents included.
#include "rewrite/rewrite.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rewrite/documents.hpp"
#include "rewrite/text.hpp"

namespace rw = warmslot::rewrite;
namespace cfg = warmslot::config;
using nlohmann::json;

namespace {

// About `bytes` bytes of numbered lines; `ja` gives Japanese lines (3 bytes per character).
std::string document(int seed, std::size_t bytes, bool ja = false) {
    std::string out;
    for (int n = 1; out.size() < bytes; ++n) {
        out += std::to_string(seed) + "." + std::to_string(n) +
               (ja ? " 文書の行です。キャッシュとスロットの話をします。東京の天気は晴れ。"
                   : " the river and the lantern of the orchard went to the quarry at dawn.") +
               "\n";
    }
    return out;
}

std::string replace_middle_line(const std::string& doc, const std::string& line) {
    const auto mid = doc.find('\n', doc.size() / 2) + 1;
    const auto end = doc.find('\n', mid) + 1;
    return doc.substr(0, mid) + line + "\n" + doc.substr(end);
}

bool valid_utf8(const std::string& s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c < 0x80         ? 1
                              : (c >> 5) == 6  ? 2
                              : (c >> 4) == 14 ? 3
                              : (c >> 3) == 30 ? 4
                                               : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (std::size_t k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

json chat(json messages) { return json{{"model", "m"}, {"messages", std::move(messages)}}; }
json msg(const std::string& role, json content) {
    return json{{"role", role}, {"content", std::move(content)}};
}
json part(const std::string& text) { return json{{"type", "text"}, {"text", text}}; }

cfg::rewrite_rules volatile_rules() {
    cfg::rewrite_rules r;
    r.volatile_presets = {"date", "time", "iso_timestamp", "uuid", "request_id"};
    return r;
}

cfg::rewrite_rules document_rules(cfg::edit_mode edits = cfg::edit_mode::reprocess) {
    cfg::rewrite_rules r;
    r.document_min_bytes = 256;
    r.document_order = true;
    r.edits = edits;
    return r;
}

// Rewrites and, like the pipeline after a successful answer, remembers what was sent.
rw::result send(const rw::compiled_rules& rules, rw::memory& mem, const json& body) {
    auto r = rw::rewrite_chat(rules, mem, body);
    mem.remember(r.update);
    return r;
}

std::string text_of(const json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string out;
    for (const auto& p : content) out += p["text"].get<std::string>();
    return out;
}

}  // namespace

TEST_CASE("rewrite: volatile lines are taken out of a text by preset") {
    const rw::compiled_rules rules(volatile_rules());
    struct row {
        std::string line;
        bool volatile_line;
    };
    const std::vector<row> rows = {
        {"Current date: 2026-11-29", true},
        {"Today is Sunday, November 29, 2026.", true},
        {"Current time: 23:05:12 UTC", true},
        {"- The time is 9:41", true},
        {"Generated at 2026-11-29T23:05:12Z", true},
        {"Request ID: 7f9c2ba4-e88f-11ee-8c90-0242ac120002", true},
        {"trace_id = abc123", true},
        {"session-id: 42", true},
        {"現在時刻 2026-11-29 23:05", true},  // ISO timestamp inside Japanese text
        {"You are a helpful assistant.", false},
        {"The treaty was signed in 1648 in Westphalia.", false},
        {"あなたは親切なアシスタントです。", false},
        {"Dates of the war: 1939-1945", false},
        {"Timeline of events", false},
        {std::string(600, 'x') + " 2026-11-29T23:05", false},  // too long to be a volatile line
    };
    for (const auto& r : rows) {
        CAPTURE(r.line);
        std::vector<std::string> taken;
        const std::string text = "Intro.\n" + r.line + "\nOutro.";
        const auto left = rw::take_volatile_lines(text, rules.volatile_lines, taken);
        if (r.volatile_line) {
            CHECK(left == "Intro.\nOutro.");
            REQUIRE(taken.size() == 1);
            CHECK(taken[0] == r.line);
        } else {
            CHECK(left == text);
            CHECK(taken.empty());
        }
    }
}

TEST_CASE("rewrite: volatile lines move from the system prompt into the final user turn") {
    const rw::compiled_rules rules(volatile_rules());
    struct row {
        std::string name;
        json body;
        std::string system_after;  // text of the system message after the rewrite
        std::string user_after;    // text of the final user message after the rewrite
        std::string applied;
    };
    const std::string block =
        "<context moved-from=\"system prompt\">\nCurrent time: 12:00:01\n</context>";
    const std::vector<row> rows = {
        {"string contents",
         chat({msg("system", "You are terse.\nCurrent time: 12:00:01\nAnswer in English."),
               msg("user", "Hi")}),
         "You are terse.\nAnswer in English.", block + "\n\nHi", "volatile_lines=1"},
        {"array-of-parts contents",
         chat({msg("system", json::array({part("You are terse.\nCurrent time: 12:00:01\n")})),
               msg("user", json::array({part("質問です。")}))}),
         "You are terse.\n", block + "質問です。", "volatile_lines=1"},
        {"Japanese system prompt",
         chat(
             {msg("system", "あなたは簡潔です。\nCurrent time: 12:00:01\n日本語で答えてください。"),
              msg("user", "こんにちは")}),
         "あなたは簡潔です。\n日本語で答えてください。", block + "\n\nこんにちは",
         "volatile_lines=1"},
        {"no final user turn: left alone",
         chat({msg("system", "Current time: 12:00:01"), msg("assistant", "Hello")}),
         "Current time: 12:00:01", "", "none"},
        {"nothing volatile", chat({msg("system", "You are terse."), msg("user", "Hi")}),
         "You are terse.", "Hi", "none"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        rw::memory mem(1 << 20);
        const auto out = rw::rewrite_chat(rules, mem, r.body);
        CHECK(rw::describe(out.applied) == r.applied);
        const auto& messages = out.body["messages"];
        CHECK(text_of(messages[0]["content"]) == r.system_after);
        if (messages.back()["role"] == "user")
            CHECK(text_of(messages.back()["content"]) == r.user_after);
        CHECK(valid_utf8(out.body.dump()));
    }
}

TEST_CASE("rewrite: unmarked volatile lines cost what they cost in the system prompt") {
    auto settings = volatile_rules();
    settings.volatile_presets.push_back("billing_header");
    settings.volatile_mark = false;
    const rw::compiled_rules rules(settings);
    const std::string billing =
        "x-anthropic-billing-header: cc_version=2.1.3.a1b; cc_entrypoint=cli;";
    struct row {
        std::string name;
        json body;
        std::string system_after;
        std::string user_after;
    };
    const std::vector<row> rows = {
        {"array of parts: the lines, each on a line of its own, as a first part",
         chat({msg("system",
                   json::array({part(billing), part("You are terse.\nDate: 2026-12-02\n")})),
               msg("user", json::array({part("Fix the build.")}))}),
         "You are terse.\n", billing + "\nDate: 2026-12-02\nFix the build."},
        {"string: a blank line between the lines and the question",
         chat({msg("system", "You are terse.\nCurrent time: 12:00:01\nAnswer in English."),
               msg("user", "Hi")}),
         "You are terse.\nAnswer in English.", "Current time: 12:00:01\n\nHi"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        rw::memory mem(1 << 20);
        const auto out = rw::rewrite_chat(rules, mem, r.body);
        const auto& messages = out.body["messages"];
        CHECK(text_of(messages[0]["content"]) == r.system_after);
        CHECK(text_of(messages.back()["content"]) == r.user_after);
        CHECK(out.body.dump().find("<context") == std::string::npos);
        // Bytes: what left the system prompt came back, plus one line break per moved line
        // that had none there (the billing block) and the blank line of a string question.
        const auto before = text_of(r.body["messages"][0]["content"]).size() +
                            text_of(r.body["messages"][1]["content"]).size();
        const auto after =
            text_of(messages[0]["content"]).size() + text_of(messages.back()["content"]).size();
        CHECK(after <= before + 2);
    }
}

TEST_CASE("rewrite: a moved billing line has its per-request hash blanked as llama-server does") {
    cfg::rewrite_rules settings;
    settings.volatile_presets = {"billing_header"};
    settings.volatile_mark = false;
    const rw::compiled_rules rules(settings);
    std::string seen;
    for (const char* hash : {"a1b2c", "9f8e7"}) {
        CAPTURE(hash);
        const std::string line =
            std::string(
                "x-anthropic-billing-header: cc_version=2.1.3.a1b; cc_entrypoint=cli; cch=") +
            hash + ";";
        rw::memory mem(1 << 20);
        const auto out =
            rw::rewrite_chat(rules, mem,
                             chat({msg("system", json::array({part(line), part("You are terse.")})),
                                   msg("user", "Hi")}));
        const auto user = text_of(out.body["messages"].back()["content"]);
        CHECK(user ==
              "x-anthropic-billing-header: cc_version=2.1.3.a1b; cc_entrypoint=cli; "
              "cch=fffff;\n\nHi");
        if (!seen.empty()) CHECK(user == seen);  // two requests' lines are one
        seen = user;
    }
}

TEST_CASE("rewrite: a user turn keeps its block when it becomes history") {
    const rw::compiled_rules rules(volatile_rules());
    rw::memory mem(1 << 20);
    const auto system = [](const std::string& time) {
        return msg("system", "Be brief.\nCurrent time: " + time);
    };
    const auto first = send(rules, mem, chat({system("12:00:01"), msg("user", "Q1")}));
    const std::string sent_q1 = first.body["messages"][1]["content"];
    const auto second = send(
        rules, mem,
        chat({system("12:00:09"), msg("user", "Q1"), msg("assistant", "A1"), msg("user", "Q2")}));
    CHECK(rw::describe(second.applied) == "volatile_lines=1, turn_notes=1");
    const auto& m = second.body["messages"];
    CHECK(m[0]["content"] == first.body["messages"][0]["content"]);  // system prompt unchanged
    CHECK(m[1]["content"] == sent_q1);                               // history as sent before
    CHECK(m[3]["content"].get<std::string>().find("12:00:09") != std::string::npos);
    CHECK(m[1]["content"].get<std::string>().find("12:00:01") != std::string::npos);
}

TEST_CASE("rewrite: cached documents come first, in cached order") {
    struct row {
        std::vector<std::uint64_t> hashes;
        std::vector<std::uint64_t> cached;
        std::vector<std::size_t> order;
    };
    const std::vector<row> rows = {
        {{3, 1, 2}, {1, 2, 3}, {1, 2, 0}},
        {{2, 4, 1, 3}, {1, 2, 3}, {2, 0, 3, 1}},  // 4 is new: after the cached ones
        {{5, 6}, {1, 2}, {0, 1}},                 // nothing cached: request order
        {{1, 2}, {}, {0, 1}},
    };
    for (const auto& r : rows) CHECK(rw::detail::cached_first(r.hashes, r.cached) == r.order);
}

TEST_CASE("rewrite: document order for content parts, messages and delimited documents") {
    const auto a = document(1, 400), b = document(2, 400), c = document(3, 400, true),
               d = document(4, 400);
    struct row {
        std::string name;
        cfg::rewrite_rules rules;
        std::function<json(const std::vector<std::string>&)> make;
        std::function<std::string(const json&)> read;  // the documents as sent, concatenated
    };
    auto delimited = document_rules();
    delimited.document_delimiters = {{"<doc>", "</doc>"}};
    const std::vector<row> rows = {
        {"parts of the final user turn", document_rules(),
         [](const std::vector<std::string>& docs) {
             json parts = json::array();
             for (const auto& x : docs) parts.push_back(part(x));
             parts.push_back(part("Which document is longest?"));
             return chat({msg("system", "Use the documents."), msg("user", parts)});
         },
         [](const json& body) { return text_of(body["messages"][1]["content"]); }},
        {"whole messages", document_rules(),
         [](const std::vector<std::string>& docs) {
             json m = json::array({msg("system", "Use the documents.")});
             for (const auto& x : docs) m.push_back(msg("user", x));
             m.push_back(msg("assistant", "Read."));
             m.push_back(msg("user", "Which one is longest?"));
             return chat(m);
         },
         [](const json& body) {
             std::string out;
             for (std::size_t i = 1; i + 2 < body["messages"].size(); ++i)
                 out += body["messages"][i]["content"];
             return out;
         }},
        {"delimited in one text", delimited,
         [](const std::vector<std::string>& docs) {
             std::string text = "Documents:\n";
             for (const auto& x : docs) text += "<doc>" + x + "</doc>\n";
             return chat({msg("system", "Use the documents."), msg("user", text + "Question?")});
         },
         [](const json& body) { return text_of(body["messages"][1]["content"]); }},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        const rw::compiled_rules rules(r.rules);
        rw::memory mem(1 << 20);
        const auto first = send(rules, mem, r.make({a, b, c}));
        CHECK(rw::describe(first.applied) == "none");
        const auto second = send(rules, mem, r.make({c, a, b}));
        CHECK(rw::describe(second.applied) == "document_order=1");
        CHECK(r.read(second.body) == r.read(first.body));
        const auto third = send(rules, mem, r.make({b, d, a, c}));
        CHECK(r.read(third.body) == r.read(r.make({a, b, c, d})));
        CHECK(valid_utf8(third.body.dump()));
    }
}

TEST_CASE("rewrite: delimited spans") {
    const rw::compiled_rules rules([] {
        cfg::rewrite_rules r;
        r.document_delimiters = {{"<document[^>]*>", "</document>"}};
        return r;
    }());
    struct row {
        std::string text;
        std::vector<std::pair<std::size_t, std::size_t>> spans;
    };
    const std::vector<row> rows = {
        {"a <document id=\"1\">x</document> b", {{2, 31}}},
        {"<document>x</document><document>y</document>", {{0, 22}, {22, 44}}},
        {"<document>never closed", {}},
        {"no documents", {}},
        {"<document>日本語</document>", {{0, 30}}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.text);
        CHECK(rw::detail::delimited_spans(r.text, rules.delimiters) == r.spans);
    }
}

// A client controls the text the patterns run over: a begin tag that never closes, hundreds
// of KB long, must cost time linear in it and a bounded stack (a backtracking engine recursed
// once per character and overflowed the stack here).
TEST_CASE("rewrite: an unclosed delimiter over a long text neither crashes nor matches") {
    cfg::rewrite_rules settings;
    settings.document_order = true;
    settings.edits = cfg::edit_mode::append;
    settings.edit_id = "<document id=\"([^\"]+)\"";
    settings.document_delimiters = {{"<document[^>]*>", "</document>"}};
    const rw::compiled_rules rules(settings);
    const std::string hostile = "<document " + std::string(200 * 1024, 'a');
    CHECK(rw::detail::delimited_spans(hostile, rules.delimiters).empty());
    CHECK(rw::detail::delimited_spans("x " + hostile + "> body </document>", rules.delimiters) ==
          std::vector<std::pair<std::size_t, std::size_t>>{{2, 2 + hostile.size() + 18}});
    CHECK(rules.edit_id->first_group("<document id=\"" + std::string(200 * 1024, 'b')).empty());

    cfg::rewrite_settings s;
    s.defaults = settings;
    const rw::rewriter r(s);
    const json body = chat({msg("system", "You are terse."), msg("user", hostile + "\nQ?")});
    const auto out = r.apply(body, "m");
    REQUIRE(out.has_value());
    CHECK(out->body == body);  // nothing delimited, nothing to reorder
}

TEST_CASE("rewrite: presets match in any case, patterns as written") {
    cfg::rewrite_rules settings;
    settings.volatile_presets = {"date"};
    settings.volatile_patterns = {"^Session: "};
    const rw::compiled_rules rules(settings);
    const std::vector<std::pair<std::string, bool>> rows = {{"CURRENT DATE: 2026-11-29", true},
                                                            {"current date: 2026-11-29", true},
                                                            {"Session: 42", true},
                                                            {"SESSION: 42", false},
                                                            {"The Session: 42", false}};
    for (const auto& row : rows) {
        CAPTURE(row.first);
        std::vector<std::string> taken;
        rw::take_volatile_lines(row.first + "\n", rules.volatile_lines, taken);
        CHECK(taken.size() == (row.second ? 1u : 0u));
    }
}

TEST_CASE("rewrite: chunks never cut a UTF-8 sequence and an edit changes few of them") {
    for (const bool ja : {false, true}) {
        CAPTURE(ja);
        const auto doc = document(7, 24000, ja);
        const auto chunks = rw::content_chunks(doc);
        std::size_t at = 0;
        for (const auto& ch : chunks) {
            CHECK(ch.bytes >= 1);
            CHECK(ch.bytes <= rw::chunk_max_bytes);
            CHECK(valid_utf8(doc.substr(at, ch.bytes)));
            at += ch.bytes;
        }
        CHECK(at == doc.size());
        const auto edited = replace_middle_line(doc, ja ? "書き換えた行。" : "An edited line.");
        const double s = rw::similarity(rw::content_chunks(edited), edited.size(),
                                        rw::sorted_hashes(chunks), doc.size());
        CHECK(s > 0.9);
        CHECK(s < 1.0);
        const auto other = document(8, 24000, ja);
        CHECK(rw::similarity(rw::content_chunks(other), other.size(), rw::sorted_hashes(chunks),
                             doc.size()) < 0.2);
    }
    CHECK(rw::excerpt("日本語のテキスト", 7) == "日本...");
    CHECK(rw::excerpt("first line\nsecond", 80) == "first line");
}

TEST_CASE("rewrite: revision notes") {
    struct row {
        std::string original, now;
        std::optional<std::string> note;
    };
    const std::vector<row> rows = {
        {"a\nb\nc\n", "a\nB\nc\n",
         "<revision>\nIn d:\nLine 2 now reads:\nB\ninstead of:\nb\n</revision>"},
        {"a\nb\nc\n", "a\nb\nx\ny\nc\n",
         "<revision>\nIn d:\nInsert after line 2:\nx\ny\n</revision>"},
        {"a\nb\nc\nd\n", "a\nd\n",
         "<revision>\nIn d:\nLines 2-3 now read:\n(deleted)\ninstead of:\nb\nc\n</revision>"},
        {"一\n二\n三", "一\n弐\n三",
         "<revision>\nIn d:\nLine 2 now reads:\n弐\ninstead of:\n二\n</revision>"},
        {"same\n", "same\n", std::nullopt},
        {"a\n" + std::string(300, 'b') + "\nc\n", "a\n" + std::string(300, 'B') + "\nc\n",
         std::nullopt},  // too long
    };
    for (const auto& r : rows) {
        CAPTURE(r.now);
        CHECK(rw::revision_note(r.original, r.now, "d", 256) == r.note);
    }
}

TEST_CASE("rewrite: edits in the middle send the cached original and a revision note") {
    const auto doc = document(11, 6000);
    const auto doc_ja = document(12, 6000, true);
    struct row {
        std::string name;
        cfg::edit_mode mode;
        std::string original, edited;
        bool parts;
        std::string applied;
    };
    const std::vector<row> rows = {
        {"append, English, string content", cfg::edit_mode::append, doc,
         replace_middle_line(doc, "11.999 a changed line."), false, "edits_append=1"},
        {"append, Japanese, array of parts", cfg::edit_mode::append, doc_ja,
         replace_middle_line(doc_ja, "変更された行です。"), true, "edits_append=1"},
        {"reprocess (the default)", cfg::edit_mode::reprocess, doc,
         replace_middle_line(doc, "11.999 a changed line."), false, "none"},
        {"append, but another document", cfg::edit_mode::append, doc, document(13, 6000), false,
         "none"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        auto settings = document_rules(r.mode);
        settings.document_order = false;
        const rw::compiled_rules rules(settings);
        rw::memory mem(1 << 20);
        const auto make = [&](const std::string& d, const std::string& q) {
            return chat(
                {msg("system", r.parts ? json::array({part(d)}) : json(d)), msg("user", q)});
        };
        send(rules, mem, make(r.original, "First question?"));
        const auto out = send(rules, mem, make(r.edited, "What changed?"));
        CHECK(rw::describe(out.applied) == r.applied);
        const auto system = text_of(out.body["messages"][0]["content"]);
        const auto user = text_of(out.body["messages"][1]["content"]);
        if (r.applied == "none") {
            CHECK(system == r.edited);
            CHECK(user == "What changed?");
        } else {
            CHECK(system == r.original);
            CHECK(user.starts_with("<revision>\nIn the document that begins \""));
            CHECK(user.ends_with("</revision>\n\nWhat changed?"));
            CHECK(user.find(r.mode == cfg::edit_mode::append && r.parts
                                ? "変更された行です。"
                                : "11.999 a changed line.") != std::string::npos);
            CHECK(user.size() < 600);
            CHECK(valid_utf8(user));
        }
    }
}

TEST_CASE("rewrite: an explicit id recognises a revision that chunks do not") {
    auto settings = document_rules(cfg::edit_mode::append);
    settings.edit_id = "<doc id=\"([^\"]+)\">";
    settings.max_note_bytes = 1 << 16;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    const std::string v1 = "<doc id=\"spec\">\n" + document(21, 2000);
    const std::string v2 = "<doc id=\"spec\">\n" + document(22, 2000);  // every line differs
    send(rules, mem, chat({msg("system", v1), msg("user", "Q1")}));
    const auto out = send(rules, mem, chat({msg("system", v2), msg("user", "Q2")}));
    CHECK(rw::describe(out.applied) == "edits_append=1");
    CHECK(out.body["messages"][0]["content"] == v1);
}

TEST_CASE("rewrite: the memory stays within its budget and forgets the least recently used") {
    rw::memory mem(64 * 1024);
    for (int i = 0; i < 40; ++i) {
        rw::memory_update u;
        u.documents.push_back({document(100 + i, 4000), ""});
        u.orders.push_back({static_cast<std::uint64_t>(i), {1, 2, 3}});
        u.notes.push_back({static_cast<std::uint64_t>(i), "note"});
        mem.remember(u);
        CHECK(mem.bytes() <= 64 * 1024);
    }
    CHECK(mem.knows(rw::hash_text(document(139, 4000))));
    CHECK_FALSE(mem.knows(rw::hash_text(document(100, 4000))));
    CHECK(mem.order(39).has_value());
    CHECK_FALSE(mem.order(0).has_value());
}

TEST_CASE("rewrite: rules per model and bodies that are not chats") {
    cfg::rewrite_settings s;
    s.models.emplace_back("dated", volatile_rules());
    const rw::rewriter r(s);
    const auto body = [](const std::string& model) {
        return json{{"model", model},
                    {"messages", {msg("system", "Current time: 12:00"), msg("user", "Q")}}};
    };
    CHECK_FALSE(r.apply(body("other"), "other").has_value());  // defaults: every rule off
    const auto out = r.apply(body("dated"), "dated");
    REQUIRE(out.has_value());
    CHECK(rw::describe(out->applied) == "volatile_lines=1");
    CHECK_FALSE(
        r.apply(json{{"model", "dated"}, {"prompt", "Current time: 12:00"}}, "dated").has_value());
    CHECK(
        rw::describe(
            r.apply(json{{"model", "dated"}, {"messages", json::array({"not an object"})}}, "dated")
                ->applied) == "none");
}

TEST_CASE("rewrite: a revision note stays with the turn that first carried it") {
    auto settings = document_rules(cfg::edit_mode::append);
    settings.document_order = false;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    const auto doc = document(31, 6000);
    const auto edited = replace_middle_line(doc, "31.999 changed.");
    send(rules, mem, chat({msg("system", doc), msg("user", "Q1")}));
    const auto second = send(rules, mem, chat({msg("system", edited), msg("user", "Q2")}));
    const std::string q2_sent = second.body["messages"][1]["content"];
    CHECK(q2_sent.starts_with("<revision>"));
    const auto third = send(rules, mem,
                            chat({msg("system", edited), msg("user", "Q2"), msg("assistant", "A2"),
                                  msg("user", "Q3")}));
    CHECK(rw::describe(third.applied) == "edits_append=1, turn_notes=1");
    CHECK(third.body["messages"][0]["content"] == doc);
    CHECK(third.body["messages"][1]["content"] == q2_sent);  // the history as sent before
    CHECK(third.body["messages"][3]["content"] == "Q3");     // no second copy of the note
    // A further edit is told again, as a whole against the cached original.
    const auto fourth = send(rules, mem,
                             chat({msg("system", replace_middle_line(doc, "31.999 changed again.")),
                                   msg("user", "Q2"), msg("assistant", "A2"), msg("user", "Q4")}));
    const std::string q4 = fourth.body["messages"][3]["content"];
    CHECK(q4.find("31.999 changed again.") != std::string::npos);
}

TEST_CASE("rewrite: odd shapes are left alone, never thrown on") {
    auto settings = volatile_rules();
    settings.document_min_bytes = 64;
    settings.document_order = true;
    settings.edits = cfg::edit_mode::append;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    const std::vector<json> bodies = {
        chat({msg("system", json::array({json{{"type", 7}, {"text", "Current time: 12:00"}}})),
              msg("user", "Q")}),
        chat({msg("system", json::array({json{{"type", "image_url"}, {"image_url", "x"}}, 5})),
              msg("user", json(nullptr))}),
        chat({json{{"role", "user"}}}),
        chat({json{{"role", 3}, {"content", std::string(100, 'x')}}, msg("user", "Q")}),
        chat(json::array()),
        json{{"messages", "not a list"}},
    };
    for (const auto& b : bodies) {
        CAPTURE(b.dump());
        CHECK_NOTHROW(send(rules, mem, b));
    }
}

TEST_CASE("rewrite: system messages after the first user turn move to the front, in order") {
    cfg::rewrite_rules settings;
    settings.system_to_front = true;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    const json body =
        chat({msg("system", "tools"), msg("user", "reminder\nquestion"), msg("system", "agents"),
              msg("assistant", "a"), msg("developer", "late"), msg("user", "next")});
    const auto r = send(rules, mem, body);
    CHECK(r.applied == std::vector<std::string>{"system_to_front=2"});
    CHECK(r.body["messages"] ==
          json::array({msg("system", "tools"), msg("system", "agents"), msg("developer", "late"),
                       msg("user", "reminder\nquestion"), msg("assistant", "a"),
                       msg("user", "next")}));
    // Nothing late: nothing applied; off: nothing moves.
    CHECK_FALSE(send(rules, mem, chat({msg("system", "s"), msg("user", "q")})).changed());
    const rw::compiled_rules off{cfg::rewrite_rules{}};
    CHECK_FALSE(off.any());
    CHECK(rules.any());
    CHECK_FALSE(rw::rewrite_chat(off, mem, body).changed());
}

TEST_CASE("rewrite: Anthropic Messages bodies go through the same rules and back") {
    cfg::rewrite_rules settings = volatile_rules();
    settings.system_to_front = true;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    // A coding agent's shape: system blocks, a dated reminder with the question, then a long
    // system-role message after the first user turn.
    const json body = {
        {"model", "m"},
        {"max_tokens", 100},
        {"system", json::array({part("x-anthropic-billing-header: cc=1; cch=abcde;"),
                                part("You are an agent.\nCurrent date: 2026-12-01\nBe careful.")})},
        {"messages",
         json::array({msg("user", json::array({part("<system-reminder>today</system-reminder>"),
                                               part("Fix the bug.")})),
                      msg("system", "Agents: a, b, c."),
                      msg("user", json::array({{{"type", "tool_result"},
                                                {"tool_use_id", "t1"},
                                                {"content", "ok"}}}))})}};
    const auto chat_form = rw::messages_to_chat(body);
    CHECK_FALSE(chat_form.contains("system"));
    CHECK(chat_form["messages"][0] == msg("system", body["system"]));
    CHECK(chat_form["messages"].size() == 4);

    auto r = send(rules, mem, chat_form);
    CHECK(r.applied == std::vector<std::string>{"system_to_front=1", "volatile_lines=1"});
    const json back = rw::chat_to_messages(r.body);
    CHECK(back["model"] == "m");
    CHECK(back["max_tokens"] == 100);
    CHECK(back["system"] ==
          json::array({part("x-anthropic-billing-header: cc=1; cch=abcde;"),
                       part("You are an agent.\nBe careful."), part("\n\nAgents: a, b, c.")}));
    REQUIRE(back["messages"].size() == 2);
    CHECK(back["messages"][0] == body["messages"][0]);
    // The moved date goes to the final user turn, before its tool result.
    const auto& last = back["messages"][1]["content"];
    REQUIRE(last.size() == 2);
    CHECK(last[0]["type"] == "text");
    CHECK(last[0]["text"].get<std::string>().find("Current date: 2026-12-01") != std::string::npos);
    CHECK(last[1]["type"] == "tool_result");

    // A string system stays a string; a body without one gets none.
    const json plain = {{"system", "S"}, {"messages", json::array({msg("user", "q")})}};
    CHECK(rw::chat_to_messages(rw::messages_to_chat(plain)) == plain);
    const json none = {{"messages", json::array({msg("user", "q")})}};
    CHECK(rw::chat_to_messages(rw::messages_to_chat(none)) == none);
}

TEST_CASE("rewrite: a type or role that is not a string is carried, never thrown on") {
    // Hostile or broken bodies: numbers and objects where strings belong.
    const json responses = json::parse(R"({
      "model": "m", "instructions": "Sys.",
      "input": [
        {"role": "user", "content": [{"type": 5, "text": "a"}, {"type": {"x": 1}, "text": "b"}]},
        {"role": 7, "content": "c"},
        {"role": "assistant", "content": [{"type": null, "text": "d"}]}
      ]})");
    json chat;
    CHECK_NOTHROW(chat = rw::responses_to_chat(responses));
    json back;
    CHECK_NOTHROW(back = rw::chat_to_responses(chat, responses));
    CHECK(back["input"] == responses["input"]);
    const json messages = json::parse(R"({
      "model": "m", "system": [{"type": 3, "text": "s"}, {"type": "text", "text": "t"}],
      "messages": [{"role": "user", "content": [{"type": [1], "text": "q"}]}]})");
    CHECK_NOTHROW(rw::chat_to_messages(rw::messages_to_chat(messages)));
}

TEST_CASE("rewrite: OpenAI Responses bodies go through the same rules and back") {
    cfg::rewrite_rules settings = volatile_rules();
    settings.system_to_front = true;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    // A string input: the dated line moves from the instructions into it.
    const json plain = {{"model", "m"},
                        {"instructions", "Be exact.\nCurrent date: 2026-12-01\nCite lines."},
                        {"input", "Which line?"},
                        {"max_output_tokens", 9}};
    auto r = send(rules, mem, rw::responses_to_chat(plain));
    CHECK(r.applied == std::vector<std::string>{"volatile_lines=1"});
    json back = rw::chat_to_responses(r.body, plain);
    CHECK(back["instructions"] == "Be exact.\nCite lines.");
    REQUIRE(back["input"].is_string());
    CHECK(back["input"].get<std::string>().find("Current date: 2026-12-01") != std::string::npos);
    CHECK(back["input"].get<std::string>().ends_with("Which line?"));
    CHECK(back["max_output_tokens"] == 9);

    // Items: a late system item joins the instructions; input_text and output_text parts keep
    // their types; a function call rides along untouched.
    const json items = json::parse(R"({
      "model": "m", "instructions": "Sys.",
      "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "first"}]},
        {"role": "system", "content": "Tools: a, b."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"role": "user", "content": [{"type": "input_text", "text": "next"}]}
      ]})");
    r = send(rules, mem, rw::responses_to_chat(items));
    CHECK(r.applied == std::vector<std::string>{"system_to_front=1", "system_merged=1"});
    back = rw::chat_to_responses(r.body, items);
    CHECK(back["instructions"] == "Sys.\n\nTools: a, b.");
    json expected = items["input"];
    expected.erase(1);
    CHECK(back["input"] == expected);
    CHECK_FALSE(back.contains("messages"));

    // Without instructions, leading system items stay items.
    const json no_instructions = json::parse(R"({"input": [{"role": "system", "content": "S"},
                                                           {"role": "user", "content": "q"}]})");
    CHECK(rw::chat_to_responses(rw::responses_to_chat(no_instructions), no_instructions) ==
          no_instructions);
}

TEST_CASE("rewrite: a Responses body's leading system and developer items become one") {
    cfg::rewrite_rules settings;
    settings.system_to_front = true;
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    // The Codex CLI's shape: instructions, two developer items, then the user's items.
    const json codex = json::parse(R"({
      "model": "m", "instructions": "Base prompt.", "prompt_cache_key": "s-1",
      "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox."}]},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Skills."},
                                                             {"type": "input_text", "text": " More."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Context."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Question?"}]}
      ]})");
    auto r = send(rules, mem, rw::responses_to_chat(codex));
    CHECK(r.applied == std::vector<std::string>{"system_merged=2"});
    json back = rw::chat_to_responses(r.body, codex);
    CHECK(back["instructions"] == "Base prompt.\n\nSandbox.\n\nSkills. More.");
    json expected = codex["input"];
    expected.erase(0);
    expected.erase(0);
    CHECK(back["input"] == expected);
    CHECK(back["prompt_cache_key"] == "s-1");
    CHECK_FALSE(back.contains(rw::responses_marker));

    // Without instructions the first item takes the others; an item with an image stops the
    // merge there (its parts are not text).
    const json items = json::parse(R"({"input": [
        {"role": "developer", "content": "A."},
        {"role": "system", "content": [{"type": "input_text", "text": "B."}]},
        {"role": "developer", "content": [{"type": "input_image", "image_url": "data:x"}]},
        {"role": "user", "content": "q"}]})");
    r = send(rules, mem, rw::responses_to_chat(items));
    CHECK(r.applied == std::vector<std::string>{"system_merged=1"});
    back = rw::chat_to_responses(r.body, items);
    REQUIRE(back["input"].size() == 3);
    CHECK(back["input"][0] == json{{"role", "developer"}, {"content", "A.\n\nB."}});
    CHECK(back["input"][1] == items["input"][2]);

    // One leading item, a chat body, or the rule off: nothing merges.
    CHECK_FALSE(send(rules, mem,
                     rw::responses_to_chat(json::parse(R"({"instructions": "S", "input": "q"})")))
                    .changed());
    CHECK_FALSE(send(rules, mem, chat({msg("system", "a"), msg("system", "b"), msg("user", "q")}))
                    .changed());
    const rw::compiled_rules off{cfg::rewrite_rules{}};
    CHECK_FALSE(rw::rewrite_chat(off, mem, rw::responses_to_chat(codex)).changed());
}

TEST_CASE("rewrite: a coding agent's first request and its next one lose the same lines") {
    // Claude Code's first request ends with its agent list, a system message after the question;
    // the next one ends with a tool result. Both must come out with the same system prompt.
    cfg::rewrite_rules settings;
    settings.system_to_front = true;
    settings.volatile_presets = {"date", "billing_header"};
    const rw::compiled_rules rules(settings);
    rw::memory mem(1 << 20);
    const auto system = msg("system",
                            "x-anthropic-billing-header: cc_version=2.1.332.6c4;\n"
                            "You are an agent.\nToday's date is 2026-12-02.\n");
    const auto first =
        send(rules, mem, chat({system, msg("user", "question"), msg("system", "agents")}));
    const auto next = send(rules, mem,
                           chat({system, msg("user", "question"), msg("system", "agents"),
                                 msg("assistant", "reading"), msg("user", "tool result")}));
    CHECK(first.applied == std::vector<std::string>{"system_to_front=1", "volatile_lines=2"});
    // The next one also gives the question back the block it carried the first time.
    CHECK(next.applied ==
          std::vector<std::string>{"system_to_front=1", "volatile_lines=2", "turn_notes=1"});
    CHECK(first.body["messages"][0] == next.body["messages"][0]);
    CHECK(first.body["messages"][2] == next.body["messages"][2]);
    CHECK(first.body["messages"][0]["content"] == "You are an agent.\n");
    CHECK(first.body["messages"][1] == msg("system", "agents"));
    // The lines went to the question the first time; the tool result does not repeat them.
    CHECK(next.body["messages"].back() == msg("user", "tool result"));

    // An Anthropic client marks its newest message with cache_control: the question is the
    // same turn once the marker moved on.
    const json marked = json::array(
        {{{"type", "text"}, {"text", "question"}, {"cache_control", {{"type", "ephemeral"}}}}});
    const json unmarked = json::array({{{"type", "text"}, {"text", "question"}}});
    rw::memory mem2(1 << 20);
    const json agents_marked = {
        {"role", "system"},
        {"content", json::array({{{"type", "text"},
                                  {"text", "agents"},
                                  {"cache_control", {{"type", "ephemeral"}}}}})}};
    const json agents = {{"role", "system"},
                         {"content", json::array({{{"type", "text"}, {"text", "agents"}}})}};
    const auto a =
        send(rules, mem2, chat({system, {{"role", "user"}, {"content", marked}}, agents_marked}));
    const auto b = send(rules, mem2,
                        chat({system,
                              {{"role", "user"}, {"content", unmarked}},
                              agents,
                              msg("assistant", "reading"),
                              msg("user", "tool result")}));
    CHECK(b.applied.back() == "turn_notes=1");
    CHECK(b.body["messages"].back() == msg("user", "tool result"));
    CHECK(a.body["messages"][2]["content"][0] == b.body["messages"][2]["content"][0]);

    // Claude Code's continuation after an answer cut at its output limit sends the late system
    // message as a plain string where the first request had one marked text block: the same
    // conversation, so the question gets its block back and the new turn does not repeat it.
    rw::memory mem3(1 << 20);
    const auto c =
        send(rules, mem3, chat({system, {{"role", "user"}, {"content", unmarked}}, agents_marked}));
    const auto d = send(rules, mem3,
                        chat({system,
                              {{"role", "user"}, {"content", unmarked}},
                              msg("system", "agents"),
                              msg("assistant", "cut"),
                              msg("user", "Output token limit hit.")}));
    CHECK(d.applied.back() == "turn_notes=1");
    CHECK(c.body["messages"][2] == d.body["messages"][2]);
    CHECK(d.body["messages"].back() == msg("user", "Output token limit hit."));
}
