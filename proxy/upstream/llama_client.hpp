// Small requests warmslot itself makes to llama-server (/props, /slots, /v1/models, /health,
// slot probes), over a worker's pool. Runs on that worker's thread.
#pragma once

#include <chrono>
#include <string>

#include "config/config.hpp"
#include "net/beast.hpp"
#include "upstream/pool.hpp"

namespace warmslot::upstream {

struct reply {
    error_code ec;  // transport error; status is 0 then
    unsigned status = 0;
    std::string body;
};

// One request with a whole-response deadline. `body` empty: no body (GET). `in_flight`, when
// given, points at the connection while the call waits on it (null before and after): closing
// that socket cuts the call, and llama-server cancels the task of a connection that closed. A
// call cut so is not sent again.
awaitable<reply> call(pool& p, const config::backend& b, http::verb method, std::string target,
                      std::string body, std::chrono::milliseconds timeout,
                      connection** in_flight = nullptr);

// POST /slots/{slot}?action=erase: true when llama-server answered that it erased the slot.
// Only for a slot warmslot holds reserved and idle.
awaitable<bool> erase_slot(pool& p, const config::backend& b, int slot,
                           std::chrono::milliseconds timeout);

}  // namespace warmslot::upstream
