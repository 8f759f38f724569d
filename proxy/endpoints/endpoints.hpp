// warmslot's own read-only endpoints: /health, /metrics, /v1/models across several backends,
// and the dashboard (its status JSON and the page's files). Each builds its answer as a value
// from what warmslot knows (the registry, the disk tier, the supervisor, the server's refusal
// counts) and, for /health and /v1/models, from the backends' own answers; the request pipeline
// writes it (service/pipeline.cpp). Nothing here changes any state.
//
// Runs on the worker serving the request; `pool` is that worker's.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/errors.hpp"
#include "config/config.hpp"
#include "http/refusals.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "status/activity.hpp"
#include "tier/disk_tier.hpp"
#include "upstream/pool.hpp"

namespace warmslot::endpoints {

// What warmslot knows of the backends it supervises (app/supervisor).
class backend_states {
  public:
    virtual ~backend_states() = default;
    // "stopped", "starting", "running" or "draining" for a supervised backend.
    virtual std::string state_of(int backend) const = 0;
    // The swap groups for the status page ([] when none) and their counters for /metrics.
    virtual nlohmann::json swap_status() const = 0;
    virtual std::string swap_metrics() const = 0;
};

// What the endpoints read. Pointers may be null: no disk tier, nothing supervised, no counts.
struct sources {
    const config::config* cfg = nullptr;
    routing::registry* reg = nullptr;
    tier::disk_tier* disk = nullptr;
    const backend_states* states = nullptr;
    const http_server::refusal_counts* refusals = nullptr;
};

// One endpoint's answer. `error`: answered as the request's API's error with `body` as its
// message. Else `body` with `content_type`: JSON (application/json) goes out as every JSON
// answer of warmslot's does; other types with `headers` besides Cache-Control: no-store and
// X-Content-Type-Options: nosniff.
struct answer {
    unsigned status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string_view, std::string>> headers;  // names: literals
    std::optional<api::error_kind> error;

    bool json() const { return content_type == "application/json"; }
    static answer failed(api::error_kind kind, std::string message) {
        answer a;
        a.error = kind;
        a.body = std::move(message);
        return a;
    }
};

// GET /health. `with_backends`: the caller's key is valid, so each backend is asked and named;
// else only the status from what the monitor last saw (no names, no request to any backend).
awaitable<answer> health(sources s, upstream::pool& pool, bool with_backends);
// GET /v1/models when several backends serve: the union of their lists, each model once.
awaitable<answer> models(sources s, upstream::pool& pool);
// GET /metrics: warmslot's counters in Prometheus' text format.
answer metrics(const sources& s);

// The dashboard's status JSON. `activity`: the requests a caller may see (`tenant`: only that
// tenant's; null for an admin); `held(backend)`: requests waiting for its slots.
awaitable<answer> status_json(sources s, const status::activity& activity,
                              const std::string* tenant, std::function<std::size_t(int)> held);
// GET /warmslot/, /warmslot/<file>: the page's files built into the binary.
answer dashboard_file(std::string_view path);

}  // namespace warmslot::endpoints
