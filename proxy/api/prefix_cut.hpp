// Where a stable prefix ends in a rendered prompt, when the chat template cannot render the
// prefix's messages alone. Pure.
//
// Some templates refuse messages without a user query (Qwen3.5's: "No user query found"). The
// prefix is then found from two renderings with stand-in user turns whose text is a marker:
// `one` = the stable messages and one such turn, `two` = the stable messages and two. In `one`
// the text before the marker ends with the opening of a user turn ("<|im_start|>user\n"); in
// `two` the text between the markers is the end of a turn and that same opening
// ("<|im_end|>\n<|im_start|>user\n"). What both end with is cut off, so the prefix ends at or a
// few tokens before the place where llama-server starts the next user message, never inside it:
// on a hybrid model llama-server makes a context checkpoint where the last user message starts
// only when that place comes after what the slot held (tools/server/server-context.cpp), and
// that checkpoint is what the next question on the same prefix rolls back to.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace warmslot::api {

// The stand-in user turn's text: plain ASCII no template changes.
inline constexpr std::string_view stand_in_marker = "warmslot-stand-in-user-turn-5f1c";

// The length of the prefix's text (a prefix of `one`), or std::nullopt when the renderings do
// not have the shape described above (a marker missing, the texts before it differing, nothing
// in common to cut, or nothing left).
std::optional<std::size_t> stable_text_end(std::string_view one, std::string_view two,
                                           std::string_view marker = stand_in_marker);

}  // namespace warmslot::api
