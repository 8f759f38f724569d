// The progress of a warm-up (POST /admin/warm asked with Accept: text/event-stream, and
// `warmslot warm`): what the server reports, read from llama-server's GET /slots, and the line
// the command prints. Pure: no sockets, no Beast.
//
// The stream: `event: progress` with to_json(warm_progress) every second while the prefix is
// primed and saved, then `event: report` with the answer's JSON (or `event: error` with an
// OpenAI-shaped error body), then the end.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace warmslot::api {

struct warm_progress {
    std::string phase;        // "prefill" or "save"
    std::uint64_t done = 0;   // prefix tokens the slot holds so far
    std::uint64_t total = 0;  // tokens of the prefix
    std::string backend;
    int slot = -1;
};

nlohmann::json to_json(const warm_progress& p);
// std::nullopt for anything that is not such an object.
std::optional<warm_progress> warm_progress_of(const nlohmann::json& j);

// Tokens slot `slot` holds now, from the body of llama-server's GET /slots (it counts a prompt's
// tokens as its batches are computed); std::nullopt when unreadable, or the slot is not listed
// or never ran a task.
std::optional<std::uint64_t> slot_tokens(std::string_view slots_body, int slot);

// One progress line: phase, tokens of total, percent, and with a positive rate the rate and
// the time left, e.g. "prefill  4096 / 12058 tokens  34%  812 tokens/s  10 s left".
std::string progress_line(const warm_progress& p, double tokens_per_second);

}  // namespace warmslot::api
