// The disk tier's calls to one backend's llama-server: the slot API, rendering and priming
// (upstream/slot_api.hpp has their requests, their deadlines and how answers are read).
//
// A client lives in the coroutine that uses it, on that worker, over the worker's pool; it keeps
// the config snapshot it was made with, so its backend and deadlines stay those of one snapshot.
// Not thread-safe. Each call is built before the method returns (nothing refers to its
// arguments afterwards); the client must outlive the calls it makes.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "config/source.hpp"
#include "upstream/slot_api.hpp"

namespace warmslot::upstream {

class pool;
struct connection;

class slot_client {
  public:
    slot_client(pool& p, config::snapshot cfg, int backend);

    const config::backend& backend() const;

    // GET /slots: the array of slots.
    boost::asio::awaitable<slot_result<nlohmann::json>> slots();
    // POST /apply-template: the prompt text the chat endpoint renders for `chat_body`.
    boost::asio::awaitable<slot_result<std::string>> apply_template(
        const nlohmann::json& chat_body);
    // POST /tokenize: `text`'s tokens as the chat endpoint makes them.
    boost::asio::awaitable<slot_result<std::vector<int>>> tokenize(std::string text);
    // POST /tokenize of `texts` as parts of one prompt (slot_api.hpp: tokenize_parts_request):
    // each one's tokens, in order; no value unless there is one group per text.
    boost::asio::awaitable<slot_result<std::vector<std::vector<int>>>> tokenize_parts(
        std::vector<std::string> texts, bool first, bool parse_special);
    boost::asio::awaitable<slot_result<saved>> save(int slot, const std::string& file);
    boost::asio::awaitable<slot_result<restored>> restore(int slot, const std::string& file);
    // Only for a slot warmslot holds reserved and idle.
    boost::asio::awaitable<call_end> erase(int slot);
    // Leaves `slot` holding exactly `tokens`; the answer's prefill timings. `in_flight`, when
    // given, points at the connection while the call waits on it: closing it cancels the
    // prefill on llama-server (upstream::call).
    boost::asio::awaitable<slot_result<api::prompt_stats>> prime(int slot,
                                                                 const std::vector<int>& tokens,
                                                                 connection** in_flight = nullptr);

  private:
    template <typename R>
    boost::asio::awaitable<R> exchange(slot_request r, R (*read)(call_end),
                                       connection** in_flight = nullptr);

    pool& pool_;
    config::snapshot cfg_;
    std::size_t backend_;
};

}  // namespace warmslot::upstream
