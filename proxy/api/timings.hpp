// What llama-server says it did with a prompt, read from a response. Pure.
#pragma once

#include <optional>
#include <string_view>

namespace warmslot::api {

struct prompt_stats {
    long cached = 0;     // prompt tokens reused from the slot (timings.cache_n)
    long processed = 0;  // prompt tokens computed (timings.prompt_n)
    long predicted = 0;  // tokens generated (timings.predicted_n)
    double prompt_ms = 0;
};

// Cheap test before parsing: only JSON that mentions timings or usage can carry stats.
bool may_carry_stats(std::string_view json) noexcept;

// Reads `timings` (cache_n, prompt_n, prompt_ms) from a response body or an SSE data payload;
// falls back to OpenAI `usage` (prompt_tokens, prompt_tokens_details.cached_tokens), then to the
// usage of Anthropic Messages (input_tokens, cache_read_input_tokens; also inside the "message"
// of a message_start event) and of OpenAI Responses (input_tokens,
// input_tokens_details.cached_tokens; also inside the "response" of a stream event).
// std::nullopt when the text is not JSON or carries neither.
std::optional<prompt_stats> find_prompt_stats(std::string_view json);

}  // namespace warmslot::api
