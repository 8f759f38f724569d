// Prefix fingerprints: a request cut into segments and hashed into a chain, so that two
// requests sharing their first k messages share their first k fingerprints. Pure.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace warmslot::routing {

// Everything up to and including one segment: its fingerprint and its size so far.
struct prefix_level {
    std::uint64_t hash = 0;   // covers the header and all segments up to this one
    std::uint64_t bytes = 0;  // cumulative bytes of segment text up to this one
    friend bool operator==(const prefix_level&, const prefix_level&) = default;
};

struct fingerprint {
    std::string model;                 // the request's "model" field ("" when absent)
    std::vector<prefix_level> levels;  // chat: one per message; completion: one per chunk
    std::uint64_t total_bytes = 0;     // == levels.back().bytes (0 when empty)
    std::uint64_t longest_segment_bytes = 0;
    // Levels before the final user turn: system prompt, documents, earlier history. The part a
    // later question on the same material shares. For completions: all full chunks.
    std::size_t stable_levels = 0;
    // The session the request belongs to (api/session_hint.hpp; 0 = none). Set by the caller,
    // never hashed: it only breaks ties between slots that hold the same prefix.
    std::uint64_t session = 0;
    // Sent without id_slot (Anthropic Messages: llama-server rebuilds the body and drops it), so
    // llama-server picks the slot itself; set by the caller, never hashed (routing/planner.hpp).
    bool floating = false;
};

enum class request_kind {
    chat,        // /v1/chat/completions, /chat/completions: "messages"
    completion,  // /completion, /v1/completions, /completions: "prompt"
};

// Cuts a request body into segments and hashes them. Returns std::nullopt for bodies that
// cannot be fingerprinted (no messages/prompt, a batch of prompts, wrong types): such requests
// are passed through without routing.
//
// The header hash (seed of the chain) covers only the fields that reach the rendered prompt or
// the KV cache (chat: tools, tool_choice, parallel_tool_calls, add_generation_prompt,
// continue_final_message, reasoning_format, chat_template_kwargs, reasoning_effort,
// response_format, json_schema, lora; completion: lora, multimodal_data). Everything else (the
// model name, sampling and output settings, per-session hints such as prompt_cache_key or
// metadata) leaves the fingerprint unchanged. A chat message segment covers role, name, content (a
// string, or each content part in order), tool_calls, tool_call_id and reasoning_content.
// Completion prompts (a string, or an array of token ids) are cut into fixed chunks
// (completion_chunk_bytes of text, or completion_chunk_tokens ids).
std::optional<fingerprint> fingerprint_request(request_kind kind, const nlohmann::json& body);

inline constexpr std::size_t completion_chunk_bytes = 4096;
inline constexpr std::size_t completion_chunk_tokens = 1024;

// Hashed into every header. Fingerprints are only comparable within one format version: a
// change to what is hashed or how bumps it, so stored fingerprints (a cache index) can tell.
inline constexpr std::uint32_t fingerprint_format_version = 2;

// Decisions callers may rely on:
// - A string content and an array of text parts hash each text as the same kind of item, so
//   "x" and [{"type":"text","text":"x"}] give equal levels; ["a","b"] parts differ from "ab".
// - Chat bytes count content text (non-text parts by their JSON size) and tool_calls (by their
//   JSON size); token-id prompts count an estimated 3 bytes per token.
// - An empty prompt string, an empty token array, a batch of prompts, token ids that are not
//   integers in 0..2^32-1, or a message that is not an object give std::nullopt.

// Number of leading levels two fingerprints share (0 when their headers differ).
std::size_t common_levels(const std::vector<prefix_level>& a,
                          const std::vector<prefix_level>& b) noexcept;

}  // namespace warmslot::routing
