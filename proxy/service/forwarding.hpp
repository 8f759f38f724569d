// One forwarded request, from its plan to its answer (service/forward.cpp plans it,
// service/send.cpp sends it): what every step reads and changes, in one request-scoped object.
// Internal to the service module. Lives in pipeline::forward's frame, on the exchange's worker.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "api/chat_view.hpp"
#include "cache/token_key.hpp"
#include "routing/fingerprint.hpp"
#include "routing/reservation.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "tier/request_scope.hpp"

namespace warmslot::service {

// What the cache reads a request's prompt from: the body itself for chat and completions, the
// chat body llama-server renders for Responses and Messages (api/chat_view.hpp).
struct prompt_view {
    const nlohmann::json* body = nullptr;     // the client's body
    std::optional<api::chat_view> converted;  // its chat view (Responses, Messages)
    bool chat_shape = false;
    std::optional<routing::fingerprint> fp;
    // The chat body the disk tier renders; null for completions and unreadable bodies.
    const nlohmann::json* chat() const {
        if (converted) return &converted->body;
        return chat_shape ? body : nullptr;
    }
};

// A backend of the request's config: its index there (the registry's id for it) and its
// settings. Backends a reload added after the request took its config are not among them.
class backend_ref {
  public:
    backend_ref(const config::config& cfg, std::size_t index)
        : index_(index), b_(&cfg.backends[index]) {}
    int id() const { return static_cast<int>(index_); }
    std::size_t index() const { return index_; }
    const config::backend& operator*() const { return *b_; }
    const config::backend* operator->() const { return b_; }

  private:
    std::size_t index_;
    const config::backend* b_;
};

struct forwarding {
    forwarding(http_server::exchange& e, outcome& o, const nlohmann::json* b, upstream::pool& p)
        : ex(e), out(o), cfg(*o.cfg), body(b), pool(p) {}
    forwarding(const forwarding&) = delete;
    forwarding& operator=(const forwarding&) = delete;

    http_server::exchange& ex;
    outcome& out;
    // The config this request runs under (outcome::cfg, taken once when it arrived): every
    // step reads this one, never the live config, so a reload meanwhile cannot show it two.
    const config::config& cfg;
    const nlohmann::json* body;  // the parsed JSON body; null for other bodies
    upstream::pool& pool;        // the worker's
    // What the disk tier's calls for this request go through: its pool and its config.
    tier::request_scope scope() const { return {pool, out.cfg}; }
    prompt_view view;
    forward_state st;
    routing::reservation r;      // the request's plan and its hold on a slot
    std::string model;           // the model that picks the backend ("" when any may serve)
    bool takes_slot = false;     // its task may run on a slot (not a tokenizer call)
    std::int64_t waited_ms = 0;  // how long it waited for a slot before it was sent
};

// llama-server rebuilds an Anthropic Messages body from the fields it knows, so an id_slot in it
// never reaches the slot choice: such requests float (routing::registry::mark_floating).
inline bool takes_id_slot(api::api_shape shape) { return shape != api::api_shape::messages; }

// Whether the request's "model" picks the backend: several model files, or a router's models
// (told apart by name even when one file serves two of them).
inline bool by_model(const config::config& cfg, const routing::registry& reg) {
    return reg.multi_model() ||
           std::any_of(cfg.backends.begin(), cfg.backends.end(),
                       [](const config::backend& b) { return !b.router.empty(); });
}

// One backend tried for the request (service/send.cpp): what its steps share.
struct backend_try {
    backend_try(const config::config& cfg, std::size_t index, bool is_planned)
        : ref(cfg, index), planned(is_planned) {}
    backend_ref ref;
    bool planned;                  // the plan's backend; else a failover, sent unpinned
    std::optional<int> slot;       // the planned slot, on the planned backend
    bool pin = false;              // sent with id_slot
    bool lora = false;             // names its own adapters
    bool tiered = false;           // the disk tier prepares its slot
    std::size_t stale_before = 0;  // the pool's count of dead connections to it before the try
    header_list extra;             // X-Warmslot-* headers of the answer
    std::optional<cache::token_chain> chain;    // the prompt's tokens, when the tier read them
    std::optional<api::prompt_stats> answered;  // the answer's, when a file is due after it
};

// What became of a request's wait for an idle slot (pipeline::hold_until_idle).
enum class hold_end {
    go,           // planned on a slot, or sent to llama-server's queue after routing.max_wait
    client_gone,  // its client left while it waited
    no_slot,      // under tenant isolation, no slot came free within routing.max_wait
};

// Where a step of a try leaves it.
enum class try_step { go, skip, recheck, done, failed };

// What became of a send over the request's candidate backends. What the answer was (status,
// bytes, whether the client left) is the request's `outcome`; why the last backend failed is
// its `forward_state::last_error`.
struct send_result {
    enum class end {
        answered,  // an answer (or an error the backend sent) was relayed to the client
        recheck,   // `backend` showed a sign of a restart and nothing was sent: check, plan again
        failed,    // no backend could be reached (or the client left first)
    };
    end what = end::failed;
    std::optional<backend_ref> backend;  // the one answering, or the one to check
};

}  // namespace warmslot::service
