// What the fake llama-server (fake_llama.hpp) knows and answers, apart from its sockets: the
// slots and their tokens, the slot files, the template and tokenizer, the scripted delays and
// failures, and the record of calls. Each call is answered as a value (status and JSON body, or
// SSE events); fake_llama.cpp only moves bytes. Thread-safe: one mutex over everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fake_llama.hpp"

namespace warmslot::testing {

struct fake_reply {
    unsigned status = 200;
    std::string body;                 // JSON (not for SSE)
    std::vector<std::string> events;  // SSE: each a whole "data: ...\n\n"
    bool sse = false;
    int busy_slot = -1;  // a generation's slot, busy until finish()
    std::uint64_t epoch = 0;
};

class fake_model {
  public:
    explicit fake_model(fake_options o);

    fake_options options() const {
        std::lock_guard lock(mu_);
        return opt_;
    }

    // Records a call as it arrives; returns its index for answered().
    std::size_t record(std::string method, std::string target, std::string body);
    void answered(std::size_t call, unsigned status);
    // Answers call `call`; std::nullopt when it needs a slot that is busy now (ask again later).
    std::optional<fake_reply> handle(std::size_t call);
    // The scripted delay of the call's key, used up once.
    std::chrono::milliseconds take_delay(std::size_t call);
    // A generation's slot is idle again (unless a restart came in between).
    void finish(int slot, std::uint64_t epoch);
    // A new process: slots empty and unused, task numbers from 0.
    void restart(std::optional<std::string> build_info, std::optional<int> slots);

    std::vector<fake_call> calls() const;
    bool wait_for(const std::function<bool(const std::vector<fake_call>&)>& pred,
                  std::chrono::milliseconds timeout) const;
    std::vector<int> slot_tokens(int slot) const;
    bool slot_busy(int slot) const;

    void delay(std::string key, std::chrono::milliseconds d, int times);
    void fail(std::string key, unsigned status, std::string message, int times);
    void script_slots(std::vector<std::string> bodies);
    void put_tokens(int slot, std::vector<int> tokens);

  private:
    struct slot_state {
        std::vector<int> tokens;
        bool processing = false;
        std::optional<std::int64_t> task;  // last task; none: never used
        std::uint64_t last_used = 0;
    };
    struct fault {
        unsigned status;
        std::string message;
        int times;
    };
    struct pause {
        std::chrono::milliseconds d;
        int times;
    };

    // All with mu_ held.
    std::optional<fake_reply> answer(std::size_t call);
    fake_reply slot_action_reply(const fake_call& c);
    fake_reply save(int slot, const std::string& file, const std::optional<fault>& f);
    fake_reply restore(int slot, const std::string& file);
    std::optional<fake_reply> generate(const fake_call& c);
    fake_reply tokenize(const std::string& body) const;
    fake_reply apply_template(const std::string& body) const;
    fake_reply props() const;
    fake_reply slots_json();
    fake_reply metrics() const;
    int pick_slot(const std::vector<int>& prompt) const;
    std::uint64_t reused(const slot_state& s, const std::vector<int>& prompt) const;
    std::optional<fault> take_fault(const std::string& key);
    void changed() { cv_.notify_all(); }

    fake_options opt_;
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    std::vector<fake_call> calls_;
    std::vector<slot_state> slots_;
    std::int64_t next_task_ = 0;
    std::uint64_t clock_ = 0;  // slot use order
    std::uint64_t epoch_ = 0;  // restarts
    std::uint64_t prompt_tokens_total_ = 0;
    std::map<std::string, std::deque<fault>> faults_;
    std::map<std::string, pause> delays_;
    std::deque<std::string> scripted_slots_;
};

// ChatML, as llama-server renders a chat body (messages, add_generation_prompt); std::nullopt
// when the body has no messages array.
std::optional<std::string> fake_render(const std::string& chat_body);

// A small GGUF file whose general.architecture is `arch`, for warmslot's model identity.
void write_fake_gguf(const std::string& path, const std::string& arch);

}  // namespace warmslot::testing
