// The request pipeline: what happens to one client request, from authorization to the access
// log line. It glues the pure modules (api/, sse/) to the I/O ones (http/, upstream/).
//
// One pipeline serves all workers; per-worker state (the upstream pools) is indexed by the
// exchange's worker, so no lock is needed. Shared counters are atomics.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/admin.hpp"
#include "api/endpoints.hpp"
#include "api/errors.hpp"
#include "api/tenant_limits.hpp"
#include "api/timings.hpp"
#include "config/config.hpp"
#include "config/source.hpp"
#include "endpoints/endpoints.hpp"
#include "http/server.hpp"
#include "rewrite/rewrite.hpp"
#include "routing/registry.hpp"
#include "routing/reservation.hpp"
#include "status/activity.hpp"
#include "tier/disk_tier.hpp"
#include "upstream/pool.hpp"

namespace warmslot::service {

class watch_list;
class wakeup_hub;
struct forwarding;   // service/forwarding.hpp: one forwarded request
struct backend_try;  // one backend tried for it
struct send_result;
enum class try_step;
enum class hold_end;
class stream_keeper;     // service/keepalive.hpp
struct router_switches;  // service/router_room.cpp
std::shared_ptr<router_switches> make_router_switches();
struct hold_line;  // service/hold.cpp
std::shared_ptr<hold_line> make_hold_line();
std::size_t held_for(hold_line& line, int backend);  // requests waiting for its slots

// What a request is, decided once when it arrives: the endpoint (kind, API shape, error
// dialect) and the model it names ("" when none). Forwarding, rewriting, the plan, the disk tier
// and the error answers all read it from here.
struct request_class {
    api::endpoint ep{api::endpoint_kind::not_found};
    std::string model;
};

// What became of a request: the access log line is made from it.
struct outcome {
    config::snapshot cfg;  // the config this request runs under, kept until it ends
    request_class cls;
    // Who called: the grant of the key sent (an admin of the default tenant when no keys are
    // configured); null until the key check passed. Points into `cfg`.
    const config::key_grant* caller = nullptr;
    unsigned status = 0;
    std::string backend;
    std::optional<api::prompt_stats> stats;
    std::optional<api::error_kind> error;
    std::uint64_t bytes_out = 0;
    bool client_gone = false;
    bool streamed = false;
    std::string route;        // X-Warmslot-Route as sent
    std::optional<int> slot;  // pinned slot
    tier::disk_action disk;   // what the disk tier did before the request ran
    std::string rewrites;     // X-Warmslot-Rewrites as sent ("" when no rule applies)
    std::string waited;       // why the request waited before it was planned, and how long
    // A streaming request's keep-alive while warmslot works before the backend answers; null
    // for other requests. Whoever answers stops it first (it may have sent the head).
    stream_keeper* keeper = nullptr;
};

struct forward_state;

struct rejection {
    api::error_kind kind;
    std::string message;
};

// What the checks made on a request's header found, in the order they are made: the Host,
// the key, the key's role, the Content-Type of a body read as JSON.
enum class gate { pass, misdirected, cross_site, unauthorized, forbidden, media_type };

// What a request got from starter::wake: go on (holding `lease` to the end of the request,
// which keeps a swap group from stopping the backend under it), or `error`: answer `kind` with
// Retry-After (503: the backend of a swap group did not start in time, or failed to start;
// 429: the tenant's limits).
struct admission {
    std::shared_ptr<void> lease;
    std::string error;  // "" = go on
    std::chrono::seconds retry_after{0};
    api::error_kind kind = api::error_kind::backend_unavailable;
};

// Starts supervised backends that are stopped (app/supervisor); optional. What it says of
// their states goes to warmslot's own endpoints (endpoints::backend_states).
class starter : public endpoints::backend_states {
  public:
    // Before a request is planned: starts the stopped on-demand backends that could serve
    // `model` and waits, within their start_timeout, until one of them is healthy. A backend
    // of a swap group may first need another member drained, saved and stopped. `gone` says
    // whether the client has left: then the request stops waiting at once (its place in a swap
    // group's queue goes with it) and the admission it gets is not used. A start of a swap
    // group member counts against `tenant`'s tenants.limits.swaps_per_minute.
    virtual awaitable<admission> wake(const config::config& cfg, std::string model,
                                      std::string tenant, std::function<bool()> gone) = 0;
    // A request was placed on `backend` (for idle_stop).
    virtual void used(int backend) = 0;
};

class pipeline {
  public:
    // `disk` may be null (no disk tier).
    pipeline(const config::source& src, http_server::workers& w, routing::registry& reg,
             tier::disk_tier* disk = nullptr);
    ~pipeline();
    awaitable<void> handle(http_server::exchange& ex);
    // The server's screen: whether a request's body is worth reading (false: it needs an API
    // key and carries none that is valid, so it gets 401 whatever its body holds).
    bool admits(const http::request_header<>& head) const;
    void set_starter(starter* s) { starter_ = s; }  // before serving
    // Where refused requests are counted (the server's counters, shown on /metrics); before
    // serving. Requests refused for their API key are counted here.
    void set_refusals(http_server::refusal_counts* r) { refusals_ = r; }
    // A config reload: the rewrite rules of the new snapshot apply to the next requests.
    void reconfigure(const config::config& cfg) { rewriter_.set_rules(cfg.rewrite); }

  private:
    awaitable<void> forward(http_server::exchange& ex, outcome& out, const nlohmann::json* body);
    awaitable<bool> wait_for_slot(const config::config& cfg, routing::ticket& t, forward_state& st);
    awaitable<void> wait_for_preparations(const config::config& cfg, int backend,
                                          forward_state& st);
    // A request llama-server places itself waits until those prepared on lower slots with its
    // prefix run there (service/floating_order.cpp).
    awaitable<void> wait_turn(const config::config& cfg, upstream::pool& pool,
                              const config::backend& b, const routing::ticket& t,
                              const routing::fingerprint& fp, forward_state& st);
    // Before a plan: floating requests sent on a backend and not yet known to run on their
    // planned slots make all its slots unknown (registry::settle_floating); GET /slots tells,
    // read again for a moment when one was sent just now (service/floating_order.cpp).
    awaitable<void> settle_floating(const config::config& cfg, upstream::pool& pool,
                                    forward_state& st);
    awaitable<void> await_checks(const config::config& cfg, int backend, forward_state& st,
                                 outcome& out, const char* why);
    // Before a request for a router's model that is not loaded: saves and unloads another of
    // the router's models when the router runs as many as it may, loads this one and has it
    // read (service/router_room.cpp).
    awaitable<void> load_router_model(const config::config& cfg, int backend, upstream::pool& pool,
                                      forward_state& st, outcome& out);
    // Tenant isolation (service/isolation.cpp): the slots of `backend` that hold another
    // tenant's state and could serve this request are emptied first. False: its own slot could
    // not be.
    awaitable<bool> isolate(upstream::pool& pool, int backend, routing::ticket& t,
                            std::optional<int> slot, bool pin, const routing::fingerprint* fp,
                            outcome& out);
    // A request that found no idle slot waits for one rather than join llama-server's queue
    // (which hands it the first slot to free, whoever's, before what that slot holds is saved);
    // in line per backend, first come first planned (service/hold.cpp). False: none came within
    // routing.max_wait.
    awaitable<bool> wait_for_idle(const config::config& cfg, routing::reservation& t,
                                  const std::function<routing::ticket()>& plan_again,
                                  forward_state& st);
    // Without isolation: a request that would wait in llama-server's queue (every slot of its
    // backend taken, registry::has_free_slot) waits here, in line, until one is free, and is
    // planned again; a plan without a slot then goes to the free slot unpinned, as before
    // (service/hold.cpp). At most routing.max_wait.
    awaitable<void> hold_for_slot(const config::config& cfg, upstream::pool& pool,
                                  routing::reservation& t,
                                  const std::function<routing::ticket()>& plan_again,
                                  forward_state& st);
    awaitable<void> clear_adapter_kv(upstream::pool& pool, const config::config& cfg, int backend,
                                     routing::ticket& t, bool floating);
    std::function<std::string()> progress_source(int backend, int slot, std::size_t total,
                                                 api::api_shape shape, std::string id,
                                                 std::string model);
    awaitable<void> save_after_answer(upstream::pool& pool, routing::reservation& r, outcome& out,
                                      const routing::fingerprint* fp,
                                      const api::prompt_stats& stats,
                                      const cache::token_chain& chain);
    // Forwarding (service/forward.cpp: the plan and its rounds; service/send.cpp: each try).
    routing::ticket plan_now(forwarding& f, bool allow_wait);
    awaitable<bool> admit(forwarding& f, admission& admitted);
    awaitable<void> ready_backends(forwarding& f);
    awaitable<void> wait_for_backend(forwarding& f, const char* why);
    awaitable<void> run_rounds(forwarding& f);
    awaitable<hold_end> hold_until_idle(forwarding& f);
    awaitable<void> fail_unsent(forwarding& f);
    awaitable<send_result> send(forwarding& f, bool may_recheck);
    awaitable<try_step> prepare_slot(forwarding& f, backend_try& bt, bool may_recheck);
    awaitable<void> prepare_prefix(forwarding& f, backend_try& bt);
    awaitable<try_step> deliver(forwarding& f, backend_try& bt, bool may_recheck);
    awaitable<void> models(http_server::exchange& ex, outcome& out);
    awaitable<void> metrics(http_server::exchange& ex, outcome& out);
    awaitable<void> health(http_server::exchange& ex, outcome& out);
    awaitable<void> admin(http_server::exchange& ex, outcome& out);  // service/admin.cpp
    awaitable<void> warm_streamed(http_server::exchange& ex, outcome& out, api::warm_request w);
    // Request rewriting (service/explain.cpp): rewrites a chat body in place before it is
    // planned and forwarded; explain answers with the rewrite and the plan, runs nothing.
    std::optional<rewrite::result> apply_rewrites(http_server::exchange& ex, nlohmann::json& body,
                                                  outcome& out);
    awaitable<void> explain(http_server::exchange& ex, outcome& out, nlohmann::json& body);
    // warmslot's own endpoints (endpoints/), answered in service/record.cpp: the dashboard's
    // page and status JSON; reply() writes what they answer.
    awaitable<void> dashboard(http_server::exchange& ex, outcome& out);
    awaitable<void> reply(http_server::exchange& ex, outcome& out, endpoints::answer a);
    endpoints::sources own_sources(const outcome& out) const;
    // What the dashboard remembers of each request (called where the access line is written).
    void record(const http_server::exchange& ex, const outcome& out, const nlohmann::json& body,
                double ms);
    awaitable<void> fail(http_server::exchange& ex, outcome& out, api::error_kind kind,
                         std::string message);
    // One SSE error `event` and the end of a stream whose head the keeper already sent.
    awaitable<void> fail_in_stream(http_server::exchange& ex, outcome& out, std::string event);
    // The admission's error (503 backend_unavailable: a backend that could not be started in
    // time; 429 rate_limited: a tenant's limit) with Retry-After.
    awaitable<void> fail_starting(http_server::exchange& ex, outcome& out, const admission& a);
    // `g`: what the header checks found (service/gate.cpp).
    std::optional<rejection> check(const http::request<http::string_body>& req,
                                   const api::endpoint& ep, gate g,
                                   const nlohmann::json* body) const;
    // service/gate.cpp: the header checks, cheap and before any body is read or parsed; the
    // caller's grant, when its key is valid, goes to `who`.
    gate screen(const config::config& cfg, const api::endpoint& ep,
                const http::request_header<>& req, const config::key_grant** who) const;
    // CORS: the headers an allowed Origin gets on every answer (service/gate.cpp).
    static void cors_headers(const config::config& cfg, http_server::exchange& ex);
    awaitable<void> preflight(http_server::exchange& ex, outcome& out);
    void log_access(const http_server::exchange& ex, const outcome& out, double ms) const;

    const config::source& src_;
    routing::registry& reg_;
    tier::disk_tier* disk_;
    net::thread_pool::executor_type compute_;  // the workers' pool for CPU-heavy work
    starter* starter_ = nullptr;
    http_server::refusal_counts* refusals_ = nullptr;
    rewrite::rewriter rewriter_;
    std::vector<std::unique_ptr<upstream::pool>> pools_;  // one per worker
    std::vector<std::unique_ptr<watch_list>> watches_;    // one per worker
    std::shared_ptr<wakeup_hub> wakeups_;                 // the registry's listener
    status::activity activity_;                           // thread-safe
    api::tenant_limits tenant_limits_;                    // thread-safe
    std::shared_ptr<router_switches> switches_;           // thread-safe
    std::shared_ptr<hold_line> holds_;                    // thread-safe
};

}  // namespace warmslot::service
