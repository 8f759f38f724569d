// Where a stable prefix ends when the template renders it only with a user turn after it.
#include "api/prefix_cut.hpp"

#include <doctest/doctest.h>

#include <string>

using warmslot::api::stable_text_end;
using warmslot::api::stand_in_marker;

namespace {

const std::string m(stand_in_marker);

// A ChatML-style template: each turn "<|im_start|>role\ntext<|im_end|>\n".
std::string chatml(const std::string& system, int users) {
    std::string out = "<|im_start|>system\n" + system + "<|im_end|>\n";
    for (int i = 0; i < users; ++i) out += "<|im_start|>user\n" + m + "<|im_end|>\n";
    return out;
}

std::string llama3(const std::string& system, int users) {
    std::string out =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system + "<|eot_id|>";
    for (int i = 0; i < users; ++i)
        out += "<|start_header_id|>user<|end_header_id|>\n\n" + m + "<|eot_id|>";
    return out;
}

}  // namespace

TEST_CASE(
    "stand-in turns: the prefix ends before the end of its turn and the user turn's opening") {
    const std::string system = "# Tools\n<tools>{...}</tools>\n\nYou are a coding agent.";
    const auto end = stable_text_end(chatml(system, 1), chatml(system, 2));
    REQUIRE(end);
    CHECK(chatml(system, 1).substr(0, *end) == "<|im_start|>system\n" + system);

    const auto l3 = stable_text_end(llama3(system, 1), llama3(system, 2));
    REQUIRE(l3);
    CHECK(llama3(system, 1).substr(0, *l3) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + system);
}

TEST_CASE(
    "stand-in turns: a system text that ends like a turn's end is cut no further than one turn") {
    const std::string system = "Reply tersely.<|im_end|>\n";
    const auto end = stable_text_end(chatml(system, 1), chatml(system, 2));
    REQUIRE(end);
    CHECK(*end == std::string("<|im_start|>system\nReply tersely.<|im_end|>\n").size());
}

TEST_CASE("stand-in turns: renderings of another shape give no prefix") {
    const std::string s = "You are a coding agent.";
    CHECK_FALSE(stable_text_end("<|im_start|>system\nno marker<|im_end|>\n", chatml(s, 2)));
    CHECK_FALSE(stable_text_end(chatml(s, 1), chatml(s, 1)));         // one marker in `two`
    CHECK_FALSE(stable_text_end(chatml(s, 1), chatml("Other.", 2)));  // texts before differ
    CHECK_FALSE(stable_text_end(m, m + m));                           // nothing before
    CHECK_FALSE(stable_text_end("abc" + m, "abc" + m + m));           // nothing between
    CHECK_FALSE(stable_text_end("ab" + m, "ab" + m + "x" + m));       // nothing in common
    CHECK_FALSE(stable_text_end("x" + m, "x" + m + "x" + m));         // nothing left
    CHECK_FALSE(stable_text_end(chatml(s, 1), chatml(s, 2), ""));
}
