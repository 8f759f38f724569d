// What warmslot writes into a client's stream while its own work runs before the backend
// answers (waiting for a slot, restoring or priming a prefix): whether a request gets such
// keep-alive, how often, the keep-alive event of its API, and how an answer that cannot be
// relayed into a stream already started is reported there. Pure: no sockets, no Beast.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "api/endpoints.hpp"

namespace warmslot::api {

// The keep-alive interval for a request of `shape` with JSON `body`: none unless the body asks
// for a stream (`"stream": true`) of an API that answers with one. `configured` is warmslot's
// setting; a positive `sse_ping_interval` in the body (llama-server's per-request ping interval,
// in seconds) makes it shorter, never longer, so the client hears from warmslot at least as
// often as it would from the backend.
[[nodiscard]] std::optional<std::chrono::milliseconds> stream_keepalive(
    api_shape shape, const nlohmann::json& body, std::chrono::milliseconds configured);

// One keep-alive event: an SSE comment (": ping"), which OpenAI and llama-server clients skip,
// or for Anthropic Messages the API's own `ping` event.
[[nodiscard]] std::string keepalive_event(error_dialect dialect);

// Prompt progress as llama-server streams it when a request sets `"return_progress": true`:
// tokens of the whole prompt, tokens reused from the slot at the start, tokens in the slot so far
// (reused ones included), and milliseconds since the prompt began.
struct prompt_progress {
    std::uint64_t total = 0;
    std::uint64_t cache = 0;
    std::uint64_t processed = 0;
    std::uint64_t time_ms = 0;
};

// Whether a request of `shape` asks for prompt progress events in its stream: `stream` and
// `return_progress` both true, on Chat Completions or llama-server's completion endpoints (the
// shapes whose progress event warmslot writes like llama-server).
[[nodiscard]] bool wants_prompt_progress(api_shape shape, const nlohmann::json& body);

// One progress event in the stream of `shape`, as llama-server writes its own: for Chat
// Completions a chunk with an empty assistant delta and `prompt_progress`, for completions an
// empty partial result with it. `id` and `model` name the chunk; `created` is Unix seconds.
[[nodiscard]] std::string prompt_progress_event(api_shape shape, const prompt_progress& p,
                                                std::string_view id, std::string_view model,
                                                std::int64_t created);

// A backend's answer with `status` and (non-SSE) `body`, reported as one SSE error event in
// `dialect`, for a stream whose 200 status line warmslot already sent. An OpenAI-shaped error
// body from llama-server goes as it is (its code and type kept); anything else is described.
[[nodiscard]] std::string sse_error_of_answer(unsigned status, std::string_view body,
                                              error_dialect dialect);

}  // namespace warmslot::api
