// rewrite: the rules that rewrite requests, by model, and the volatile-line presets.
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using warmslot::test::bad_case;
using warmslot::test::one_backend;

namespace {

cfg::config parse(std::string_view yaml) { return warmslot::test::parse_with_fake_env(yaml); }

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

}  // namespace

TEST_CASE("config: rewrite defaults are off and models override the default block") {
    const cfg::config none = parse(one_backend);
    CHECK(none.rewrite.defaults.volatile_presets.empty());
    CHECK(none.rewrite.defaults.volatile_patterns.empty());
    CHECK_FALSE(none.rewrite.defaults.document_order);
    CHECK(none.rewrite.defaults.edits == cfg::edit_mode::reprocess);
    CHECK(none.rewrite.defaults.document_min_bytes == 2048);
    CHECK(none.rewrite.memory == 64ull * 1024 * 1024);
    CHECK(none.rewrite.models.empty());

    // models before default: the order in the file does not matter
    const cfg::config c = parse(std::string(one_backend) +
                                "rewrite:\n"
                                "  memory: 16MiB\n"
                                "  models:\n"
                                "    qwen3.5-9b:\n"
                                "      system_messages: front\n"
                                "      documents:\n"
                                "        edits: append\n"
                                "        edit_similarity: 0.6\n"
                                "    plain: {}\n"
                                "  default:\n"
                                "    volatile_lines:\n"
                                "      presets: [date, time]\n"
                                "      patterns: ['^Session: ']\n"
                                "      mark: false\n"
                                "    documents:\n"
                                "      min_bytes: 4KiB\n"
                                "      order: true\n"
                                "      delimiters:\n"
                                "        - begin: '<document[^>]*>'\n"
                                "          end: '</document>'\n"
                                "      edit_id: '<document id=\"([^\"]+)\"'\n"
                                "      max_note_bytes: 8KiB\n");
    CHECK(c.rewrite.memory == 16ull * 1024 * 1024);
    const auto& d = c.rewrite.defaults;
    CHECK(d.volatile_presets == std::vector<std::string>{"date", "time"});
    CHECK(d.volatile_patterns == std::vector<std::string>{"^Session: "});
    CHECK_FALSE(d.volatile_mark);
    CHECK(cfg::rewrite_rules{}.volatile_mark);  // marked unless said otherwise
    CHECK(d.document_min_bytes == 4096);
    CHECK(d.document_order);
    REQUIRE(d.document_delimiters.size() == 1);
    CHECK(d.document_delimiters[0].begin == "<document[^>]*>");
    CHECK(d.document_delimiters[0].end == "</document>");
    CHECK(d.edit_id == "<document id=\"([^\"]+)\"");  // the example config's
    CHECK(d.max_note_bytes == 8192);
    const auto& q = c.rewrite.for_model("qwen3.5-9b");
    CHECK(q.edits == cfg::edit_mode::append);
    CHECK(q.edit_similarity == doctest::Approx(0.6));
    CHECK(q.document_order);  // inherited
    CHECK(q.system_to_front);
    CHECK_FALSE(d.system_to_front);
    CHECK(q.volatile_presets == d.volatile_presets);
    CHECK(&c.rewrite.for_model("plain") != &d);
    CHECK(c.rewrite.for_model("plain").edits == cfg::edit_mode::reprocess);
    CHECK(&c.rewrite.for_model("unknown") == &d);
    for (const auto name : cfg::volatile_preset_names())
        CHECK(cfg::volatile_preset(name).has_value());
    CHECK_FALSE(cfg::volatile_preset("weekday").has_value());
}

TEST_CASE("config: rewrite is validated strictly") {
    const std::string head = std::string(one_backend) + "rewrite:\n";  // rewrite: is line 4
    const bad_case cases[] = {
        {head + "  defaults: {}\n", "rewrite.defaults", 5,
         "unknown key; expected one of: memory, default, models"},
        {head + "  default:\n    volatile:\n      presets: [date]\n", "rewrite.default.volatile", 6,
         "unknown key"},
        {head + "  default:\n    system_messages: first\n", "rewrite.default.system_messages", 6,
         "expected keep or front, found \"first\""},
        {head + "  default:\n    volatile_lines:\n      presets: [date, weekday]\n",
         "rewrite.default.volatile_lines.presets[1]", 7,
         "unknown preset; expected one of: date, time"},
        {head + "  default:\n    volatile_lines:\n      patterns: ['(unclosed']\n",
         "rewrite.default.volatile_lines.patterns[0]", 7, "invalid regular expression"},
        {head + "  default:\n    volatile_lines:\n      mark: maybe\n",
         "rewrite.default.volatile_lines.mark", 7, "expected true or false"},
        {head + "  default:\n    volatile_lines:\n      patterns: date\n",
         "rewrite.default.volatile_lines.patterns", 7, "expected a list"},
        {head + "  default:\n    documents:\n      edits: sometimes\n",
         "rewrite.default.documents.edits", 7, "expected reprocess or append"},
        {head + "  default:\n    documents:\n      edit_similarity: 1.5\n",
         "rewrite.default.documents.edit_similarity", 7, "from 0.1 to 1"},
        {head + "  default:\n    documents:\n      edit_id: 'id=\\w+'\n",
         "rewrite.default.documents.edit_id", 7, "needs a capture group"},
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d>'\n",
         "rewrite.default.documents.delimiters[0].end", 8, "is required"},
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d>'\n          "
                "end: '[x'\n",
         "rewrite.default.documents.delimiters[0].end", 9, "invalid regular expression"},
        // RE2 syntax: lookaround and backreferences (ECMAScript has them) are refused at load.
        {head + "  default:\n    documents:\n      delimiters:\n        - begin: '<d(?=>)'\n       "
                "   end: '</d>'\n",
         "rewrite.default.documents.delimiters[0].begin", 8,
         "invalid regular expression (RE2 syntax"},
        {head + "  default:\n    volatile_lines:\n      patterns: ['(?<!x)date']\n",
         "rewrite.default.volatile_lines.patterns[0]", 7, "no lookahead or lookbehind"},
        {head + "  default:\n    documents:\n      edit_id: '(a)\\1'\n",
         "rewrite.default.documents.edit_id", 7, "no backreferences"},
        {head + "  models:\n    q:\n      documents:\n        order: often\n",
         "rewrite.models[\"q\"].documents.order", 8, "expected true or false"},
        {head + "  models:\n    q: {}\n    q: {}\n", "rewrite.models[\"q\"]", 7, "duplicate"},
        {head + "  models: [q]\n", "rewrite.models", 5, "expected a map of model names"},
        {head + "  memory: 1KiB\n", "rewrite.memory", 5, "must be from"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}
