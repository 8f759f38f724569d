// The Chat Completions body that llama-server renders for an OpenAI Responses or an Anthropic
// Messages request. Pure.
//
// llama-server answers both APIs by converting the body into a chat request
// (server_chat_convert_responses_to_chatcmpl and server_chat_convert_anthropic_to_oai in
// tools/server/server-chat.cpp of the pinned release) and rendering that with the model's chat
// template. warmslot does the same conversion for the fields that reach the prompt, so one
// fingerprint, one planner and one disk tier (whose prefixes are rendered by /apply-template)
// serve every shape: two requests of different shapes that render the same prompt share it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "api/endpoints.hpp"

namespace warmslot::api {

struct chat_view {
    // "messages", the tool fields, the template options, and "model" (kept for routing even
    // where llama-server drops it). Responses bodies keep their other fields too; sampling and
    // output fields never reach the prompt.
    nlohmann::json body;
    // Anthropic cache_control breakpoints are the client saying where its stable prefix ends:
    // the number of view messages up to and including the last block or message marked with
    // one before the final user message (system blocks count as the first message).
    std::optional<std::size_t> breakpoint;
};

// The chat view of a Responses or Messages body. std::nullopt for a body llama-server would
// refuse (no "input"/"messages", a "previous_response_id", an item of unknown type, ...) or that
// is not a Responses or Messages body: such requests are passed through without routing.
std::optional<chat_view> to_chat_view(api_shape shape, const nlohmann::json& body);

// llama-server replaces the per-request hash in a coding agent's
// "x-anthropic-billing-header: ...; cch=XXXXX;" system text with "fffff" before rendering, so
// the prompt keeps its prefix; the view does the same.
void normalize_billing_header(std::string& system_text);

}  // namespace warmslot::api
