// An in-process stand-in for llama-server in component tests: the parts of its API warmslot uses
// (GET /health, /props, /slots, /v1/models, /lora-adapters, /metrics; POST /slots/N?action=save,
// restore, erase; /tokenize, /apply-template; /completion and /v1/chat/completions, streamed or
// not), with slots that hold token lists, slot files on disk in llama.cpp's sequence-state
// layout, and `timings` computed from what the chosen slot holds. Scripted per test: delays and
// failures per call, restarts, /slots answers given in advance. It records every call.
//
// Tokenization is trivial and deterministic: BOS, then one token per byte; with special tokens
// parsed, `<|im_start|>` and `<|im_end|>` are one token each. The chat template is ChatML.
// /tokenize, /apply-template and the generation endpoints agree, as llama-server's do.
//
// How a slot reuses a prompt depends on `fake_options::rollback`: `anywhere` (a plain
// transformer: the common prefix is reused, at least one prompt token computed) or
// `extension_only` (a hybrid model without context checkpoints: only a prompt that strictly
// extends what the slot holds reuses it; anything else is computed in full).
//
// Owns one io_context and the one thread that runs it (every socket lives there); the public
// methods are thread-safe and meant for the test thread. The destructor stops the thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace warmslot::testing {

struct fake_options {
    int slots = 2;
    std::uint64_t n_ctx = 16384;  // per slot
    std::string slot_dir;         // --slot-save-path; "" answers save and restore with 501
    std::string build_info = "b1-fake";
    std::string alias = "fake";
    // The model file /props names. `architecture` non-empty: a small GGUF file with that
    // `general.architecture` is written at `model_path` (so warmslot reads its identity and
    // kind from its content); empty: the path names no file (architecture unknown).
    std::string model_path;
    std::string architecture;
    enum class rollback { anywhere, extension_only } reuse = rollback::anywhere;
    std::string reply = "ok";  // what every generation answers (one token per byte)
    // What /timings says prefill costs (not real time): warmslot learns its prefill rate here.
    double prompt_ms_per_token = 1.0;
};

// One call the fake answered (or cut short by a restart), in arrival order.
struct fake_call {
    std::string method;
    std::string target;  // as sent, with its query
    std::string body;
    std::chrono::steady_clock::time_point at;  // when the request was read
    bool handled = false;  // its answer is made (what it read or changed is done); it may
                           // still wait for a scripted delay before it is sent
    unsigned status = 0;   // 0 while unanswered
    std::string key;       // what scripts match: "save", "restore", "erase" for slot actions, else
                           // the path ("/completion", "/slots", ...)
    int slot = -1;         // the slot a slot action or generation ran on, when one did
};

// Token ids of the fake's vocabulary.
inline constexpr int fake_bos = 1;
inline constexpr int fake_im_start = 3;
inline constexpr int fake_im_end = 4;
inline constexpr int fake_byte_base = 16;  // byte b is token b + 16

std::vector<int> fake_tokenize(std::string_view text, bool add_special, bool parse_special);

class fake_llama {
  public:
    explicit fake_llama(fake_options o);
    ~fake_llama();
    fake_llama(const fake_llama&) = delete;
    fake_llama& operator=(const fake_llama&) = delete;

    std::uint16_t port() const;
    fake_options options() const;  // as now (a restart may change them)

    // --- what happened -----------------------------------------------------------------------
    std::vector<fake_call> calls() const;
    std::vector<fake_call> calls(std::string_view key) const;  // those with this key
    // Waits until `pred(calls)` holds or `timeout` passes; returns whether it holds.
    bool wait_for(const std::function<bool(const std::vector<fake_call>&)>& pred,
                  std::chrono::milliseconds timeout) const;
    std::vector<int> slot_tokens(int slot) const;
    bool slot_busy(int slot) const;

    // --- scripting -----------------------------------------------------------------------------
    // The next `times` calls with `key` (see fake_call::key; -1: all of them) wait `d` before
    // they answer. A generation's slot is busy (is_processing) meanwhile.
    void delay(std::string key, std::chrono::milliseconds d, int times = -1);
    // The next `times` calls with `key` get `status` and an error body with `message` instead.
    // A failed save leaves half a file behind (as a write that broke off would); a failed
    // restore empties the slot (as llama-server's does).
    void fail(std::string key, unsigned status, std::string message, int times = 1);
    // The next GET /slots answers are these bodies, one each, before the real ones resume.
    void script_slots(std::vector<std::string> bodies);
    // Outside traffic: the slot now holds `tokens`, as if another client ran a task there.
    void put_tokens(int slot, std::vector<int> tokens);
    // A restart: every connection closes, the listener is closed for `down` (connections are
    // refused; with 0 it stays open, a restart too quick to be seen refusing), then a new
    // process answers: slots empty and never used, task numbers from 0,
    // `build_info` and the slot count replaced when given (a new identity).
    void restart(std::chrono::milliseconds down = std::chrono::milliseconds(0),
                 std::optional<std::string> build_info = std::nullopt,
                 std::optional<int> slots = std::nullopt);
    // Connections the fake accepted since it started.
    std::size_t connections() const;

    struct impl;

  private:
    std::unique_ptr<impl> impl_;
};

}  // namespace warmslot::testing
