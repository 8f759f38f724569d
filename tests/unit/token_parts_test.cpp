// A prompt's tokens by parts: where prompts are cut, which texts may be special tokens, and the
// memory of parts' tokens, as tables.
#include "cache/token_parts.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace warmslot::cache;

TEST_CASE("marker candidates: bracketed words without spaces, each once") {
    struct row {
        std::string text;
        std::vector<std::string> want;
    };
    const std::vector<row> rows = {
        {"<|im_start|>system\nhi<|im_end|>\n<|im_start|>user", {"<|im_start|>", "<|im_end|>"}},
        {"<start_of_turn>user\nx<end_of_turn>", {"<start_of_turn>", "<end_of_turn>"}},
        {"<s>[INST] q [/INST] a</s>", {"<s>", "[INST]", "[/INST]", "</s>"}},
        {"a < b and c > d, <>, [], [lower], <a b>", {}},
        {"<<|x|>", {"<|x|>"}},
        {"unclosed <|im_start", {}},
        {"<" + std::string(60, 'x') + ">", {}},  // too long for a token's text
    };
    for (const auto& r : rows) {
        CAPTURE(r.text);
        CHECK(marker_candidates(r.text, 16) == r.want);
    }
    CHECK(marker_candidates("<a><b><c><d>", 2) == std::vector<std::string>{"<a>", "<b>"});
}

TEST_CASE("parts start before markers once the part before is long enough") {
    const std::vector<std::string> markers = {"<|im_start|>"};
    const std::string text = "<|im_start|>system\n0123456789<|im_start|>user\nab<|im_start|>x";
    CHECK(part_starts(text, markers, 1) == std::vector<std::size_t>{0, 29, 48});
    CHECK(part_starts(text, markers, 20) == std::vector<std::size_t>{0, 29});
    CHECK(part_starts(text, markers, 100) == std::vector<std::size_t>{0});
    CHECK(part_starts(text, {}, 1) == std::vector<std::size_t>{0});
    // A marker's text that is not known is not a cut.
    CHECK(part_starts(text, {"<|im_end|>"}, 1) == std::vector<std::size_t>{0});
    // Two texts that begin alike are cut alike up to where they differ.
    const std::string longer = text + "tail<|im_start|>more";
    const auto a = part_starts(text, markers, 1), b = part_starts(longer, markers, 1);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
}

TEST_CASE("a candidate is special when parsing makes it one token that plain text does not") {
    CHECK(is_special({151644}, {27, 91, 318, 4906, 91, 29}));
    CHECK_FALSE(is_special({27, 91}, {27, 91}));  // not one token
    CHECK_FALSE(is_special({1029}, {1029}));      // a plain word of the vocabulary
    CHECK_FALSE(is_special({}, {}));
}

TEST_CASE("judged candidates are remembered and bounded") {
    token_parts p;
    CHECK(p.unjudged("<a> <b> <a>", 16) == std::vector<std::string>{"<a>", "<b>"});
    p.judge("<a>", true);
    p.judge("<b>", false);
    p.judge("<a>", false);  // judged once
    CHECK(p.markers() == std::vector<std::string>{"<a>"});
    CHECK(p.unjudged("<a> <b> <c>", 16) == std::vector<std::string>{"<c>"});
    for (std::size_t i = 0; i < token_parts::max_judged; ++i)
        p.judge("<x" + std::to_string(i) + ">", false);
    CHECK(p.judged_full());
    CHECK(p.unjudged("<new>", 16).empty());
}

TEST_CASE("parts' tokens: found by text, least recently used dropped") {
    token_parts p(10);
    p.remember("alpha", {1, 2, 3, 4});
    p.remember("beta", {5, 6, 7, 8});
    REQUIRE(p.find("alpha"));
    CHECK(*p.find("alpha") == std::vector<int>{1, 2, 3, 4});
    CHECK_FALSE(p.find("alph"));
    p.remember("gamma", {9, 9, 9});  // over 10 tokens: beta, the least recent, goes
    CHECK_FALSE(p.find("beta"));
    CHECK(p.find("alpha"));
    CHECK(p.remembered_tokens() == 7);
    p.remember("huge", std::vector<int>(11, 1));  // larger than the memory: not kept
    CHECK_FALSE(p.find("huge"));
}

TEST_CASE("a prompt's start: one token (BOS) or none keeps parts; an EOS too turns them off") {
    token_parts bos, none, eos;
    bos.set_start({1});
    none.set_start({});
    eos.set_start({1, 2});
    CHECK(bos.usable());
    CHECK(none.usable());
    CHECK(*none.start() == std::vector<int>{});
    CHECK_FALSE(eos.usable());
    CHECK_FALSE(token_parts().start());
}

TEST_CASE("parts are checked against the whole on the first prompts, then now and then") {
    token_parts p;
    std::vector<bool> due;
    for (int i = 0; i < 130; ++i) due.push_back(p.check_due());
    CHECK(due[0]);
    CHECK(due[1]);
    CHECK(due[2]);
    CHECK_FALSE(due[3]);
    CHECK(due[64]);
    CHECK(due[128]);
    CHECK(std::count(due.begin(), due.end(), true) == 5);
    p.remember("a", {1});
    p.checked(true);
    CHECK(p.usable());
    p.checked(false);  // one difference: parts are off, and forgotten
    CHECK_FALSE(p.usable());
    CHECK_FALSE(p.find("a"));
}
