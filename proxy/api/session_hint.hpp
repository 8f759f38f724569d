// The session a request belongs to, from the hints clients already send. Pure.
//
// Agents name their session: the OpenAI APIs' "prompt_cache_key" (the Codex CLI sends its
// session id there), and headers: Codex's "session-id", Claude Code's "x-claude-code-session-id".
// A hint only helps choose among slots that hold the same prefix (routing/planner.hpp): it never
// enters a fingerprint, so it cannot change what a prefix is or which file holds it.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string_view>

namespace warmslot::api {

// Request headers that carry a session id, in the order they are looked up.
inline constexpr std::array<std::string_view, 4> session_headers = {
    "x-claude-code-session-id", "session-id", "session_id", "x-session-id"};

// Longer hints are not a session id: ignored rather than hashed.
inline constexpr std::size_t max_session_hint_bytes = 256;

// A hash of the body's "prompt_cache_key" when it is a non-empty string, else of `header` (the
// first session header present, "" when none); 0 when there is no usable hint.
std::uint64_t session_hint(const nlohmann::json* body, std::string_view header);

}  // namespace warmslot::api
