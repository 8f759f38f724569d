// The llama-server calls the disk tier makes (llama-server.md section 2), as plain values: each
// call's request, its deadline, and what its answer says. Pure: no Asio, no Beast, no I/O; the
// client that sends them is upstream/slot_client.hpp.
//
// The deadlines, all from timeout_for():
// - save, restore, erase: cache.slot_call_timeout. They move or drop a whole slot's KV state
//   on llama-server's inference thread and wait for a busy slot to be idle: how long that may
//   take is the operator's setting. A save cut by it counts as a failed save; a restore cut by
//   it keeps its file (docs/config.md).
// - prime (/completion with the prefix's tokens): timeouts.upstream_response, the bound on any
//   request's prefill, since a priming is the prefill that request would have done.
// - GET /slots, /apply-template, /tokenize: query_timeout, fixed. They read state or render
//   text and answer in milliseconds; the bound only catches a backend that hangs, and a short
//   slot_call_timeout (set to give up on slow disks) must not cut them.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/timings.hpp"
#include "config/config.hpp"

namespace warmslot::upstream {

enum class slot_call { slots, apply_template, tokenize, save, restore, erase, prime };

inline constexpr std::chrono::milliseconds query_timeout{120'000};

// The deadline of one whole call (connect, request, answer) of kind `c` under `cfg`.
std::chrono::milliseconds timeout_for(slot_call c, const config::config& cfg);

struct slot_request {
    slot_call call = slot_call::slots;
    bool get = false;    // GET without a body; else POST of a JSON body
    std::string target;  // path and query
    std::string body;
};

slot_request slots_request();
// `chat_body`: a chat request, rendered as the chat endpoint would.
slot_request apply_template_request(const nlohmann::json& chat_body);
// Tokenized as the chat endpoint does: special tokens added and parsed.
slot_request tokenize_request(std::string text);
// Several texts tokenized in one call, as the parts of one prompt in this order (llama-server's
// /tokenize takes an array of texts and token ids): `first` says texts[0] begins the prompt and
// gets the tokens a prompt begins with; the others get none. `parse_special` false tokenizes
// special tokens' texts as plain text. The answer holds the texts' tokens with `part_separator`
// between them, which no tokenizer makes (read_tokenize_parts_answer cuts there).
inline constexpr int part_separator = -1;
slot_request tokenize_parts_request(const std::vector<std::string>& texts, bool first,
                                    bool parse_special);
// `file`: a plain file name in the backend's --slot-save-path.
slot_request save_request(int slot, const std::string& file);
slot_request restore_request(int slot, const std::string& file);
slot_request erase_request(int slot);
// A /completion that leaves `slot` holding exactly `tokens` (one token sampled, never decoded).
slot_request prime_request(int slot, const std::vector<int>& tokens);

// How one call ended, without the transport's types.
struct call_end {
    bool answered = false;  // false: no answer (connect failed, deadline, connection cut)
    unsigned status = 0;    // the HTTP status when answered
    std::string body;
    std::string error;  // why there was no answer ("" when answered)
    bool ok() const { return answered && status == 200; }
    // For the log: why there was no answer, else the status.
    std::string what() const { return answered ? std::to_string(status) : error; }
};

// A call's end and what its answer said; `value` is empty unless llama-server answered 200 with
// the expected shape.
template <typename T>
struct slot_result {
    call_end end;
    std::optional<T> value;
};

struct restored {
    std::uint64_t tokens = 0;  // n_restored
    double ms = 0;             // timings.restore_ms
};
struct saved {
    std::uint64_t tokens = 0;  // n_saved
    std::uint64_t bytes = 0;   // n_written
    double ms = 0;             // timings.save_ms
};

// Readers of the answers. A count field of the wrong type throws nlohmann::json::type_error, as
// reading it in place would; the tier's callers catch it and skip the disk tier.
slot_result<nlohmann::json> read_slots_answer(call_end e);       // the array of slots
slot_result<std::string> read_template_answer(call_end e);       // "prompt"
slot_result<std::vector<int>> read_tokenize_answer(call_end e);  // "tokens"
// "tokens" cut at each part_separator: one more group than separators.
slot_result<std::vector<std::vector<int>>> read_tokenize_parts_answer(call_end e);
slot_result<saved> read_save_answer(call_end e);
slot_result<restored> read_restore_answer(call_end e);
slot_result<api::prompt_stats> read_prime_answer(call_end e);  // the prefill's timings

}  // namespace warmslot::upstream
