// warmslot's own endpoints: /health, /metrics, and /v1/models across several backends.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "endpoints/endpoints.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot::endpoints {
namespace {

constexpr std::chrono::milliseconds probe_timeout{3000};

void counter(std::string& out, std::string_view name, std::string_view help, double value,
             std::string_view labels = "") {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{} {}\n", name, help, name, name, labels,
                       value);
}

void gauge(std::string& out, std::string_view name, std::string_view help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
}

}  // namespace

awaitable<answer> health(sources s, upstream::pool& pool, bool with_backends) {
    const auto& cfg = *s.cfg;
    const auto views = s.reg->snapshot();
    answer a;
    if (!with_backends) {
        // A client without the key gets the bare status, from what the monitor last saw: no
        // backend names or URLs, and no request to any backend on its behalf.
        bool any_ok = false;
        for (std::size_t i = 0; i < cfg.backends.size() && i < views.size(); ++i) {
            any_ok = any_ok || (!cfg.backends[i].retired && views[i].healthy);
        }
        a.status = any_ok ? 200 : 503;
        a.body = nlohmann::json{{"status", any_ok ? "ok" : "unavailable"}}.dump();
        co_return a;
    }
    nlohmann::json backends = nlohmann::json::array();
    bool any_ok = false;
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (b.retired || i >= views.size()) continue;
        const auto r = co_await upstream::call(pool, b, http::verb::get, "/health", "",
                                               std::min(cfg.timeouts.connect, probe_timeout));
        const char* state = r.status == 200 ? "ok" : r.status == 503 ? "loading" : "unreachable";
        any_ok = any_ok || r.status == 200;
        backends.push_back({{"name", b.name},
                            {"url", b.url},
                            {"status", state},
                            {"http_status", r.status},
                            {"routing", views[i].pinning},
                            {"slots", views[i].slots.size()}});
    }
    const nlohmann::json report = {{"status", any_ok ? "ok" : "unavailable"},
                                   {"warmslot", {{"status", "ok"}}},
                                   {"backends", backends}};
    a.status = any_ok ? 200 : 503;
    a.body = report.dump();
    co_return a;
}

// The union of every backend's /v1/models, each model once.
awaitable<answer> models(sources s, upstream::pool& pool) {
    const auto& cfg = *s.cfg;
    auto& reg = *s.reg;
    nlohmann::json data = nlohmann::json::array();
    std::vector<std::string> seen;
    const auto views = reg.snapshot();
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (b.retired) continue;
        // Supervised: warmslot's own state of the process; else what the monitor last saw.
        std::string state =
            s.states && b.supervised()
                ? s.states->state_of(static_cast<int>(i))
                : (i < views.size() && views[i].healthy ? "running" : "unavailable");
        // A router's model the router has not loaded: a request loads it.
        if (!b.router.empty() && state == "running" && reg.asleep(static_cast<int>(i)))
            state = "unloaded";
        // A stopped process has no port to ask (another program may have it now).
        const bool ask = state != "stopped" && state != "draining";
        const auto r = ask ? co_await upstream::call(pool, b, http::verb::get, "/v1/models", "",
                                                     cfg.timeouts.connect)
                           : upstream::reply{};
        const auto list = nlohmann::json::parse(r.body, nullptr, false);
        if (r.status == 200 && list.is_object() && list.contains("data") &&
            list["data"].is_array()) {
            for (auto m : list["data"]) {
                if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
                const auto id = m["id"].get<std::string>();
                // A router lists all its models: each of its backends gives its own.
                if (!b.router_model.empty() && id != b.router_model) continue;
                if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
                seen.push_back(id);
                m["owned_by"] = b.name;
                m["state"] = state;
                data.push_back(std::move(m));
            }
        }
        for (const auto& name : b.models) {
            if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
            seen.push_back(name);
            data.push_back(
                {{"id", name}, {"object", "model"}, {"owned_by", b.name}, {"state", state}});
        }
    }
    answer a;
    a.body = nlohmann::json{{"object", "list"}, {"data", data}}.dump();
    co_return a;
}

answer metrics(const sources& s) {
    const auto c = s.reg->totals();
    const auto* disk = s.disk;
    std::string text;
    text +=
        "# HELP warmslot_requests_total Routed requests by planned route.\n"
        "# TYPE warmslot_requests_total counter\n";
    for (int r = 0; r <= static_cast<int>(routing::route::pass_through); ++r) {
        text += fmt::format("warmslot_requests_total{{route=\"{}\"}} {}\n",
                            routing::name(static_cast<routing::route>(r)), c.requests_by_route[r]);
    }
    // Priming is prompt work warmslot asked for: counted as processed (so the counter matches
    // the backends' own llamacpp:prompt_tokens_total) and on its own.
    const std::uint64_t primed = disk ? disk->primed_tokens_total() : 0;
    counter(text, "warmslot_prompt_tokens_processed_total",
            "Prompt tokens the backends computed for requests through warmslot, warmslot's own "
            "priming included.",
            static_cast<double>(c.prompt_tokens_processed + primed));
    counter(text, "warmslot_prompt_tokens_primed_total",
            "Prompt tokens the backends computed to prime slots with a stable prefix before "
            "saving it (part of warmslot_prompt_tokens_processed_total).",
            static_cast<double>(primed));
    counter(text, "warmslot_disk_listings_total",
            "Reads of the disk tier's indexes for status and the dashboard (none while no index "
            "changed).",
            static_cast<double>(disk ? disk->listing_reads() : 0));
    counter(text, "warmslot_prompt_tokens_reused_total",
            "Prompt tokens the backends reused from their slots.",
            static_cast<double>(c.prompt_tokens_reused));
    counter(text, "warmslot_prefill_seconds_saved_total",
            "Estimated prefill seconds saved: reused tokens over the learned prefill rate.",
            c.prefill_seconds_saved);
    counter(text, "warmslot_route_mispredictions_total",
            "Planned hits where the backend reused less than half the expected tokens.",
            static_cast<double>(c.mispredictions));
    counter(text, "warmslot_belief_corrections_total",
            "Slot beliefs corrected from GET /slots or after a backend restart.",
            static_cast<double>(c.corrections));
    text +=
        "# HELP warmslot_replica_files_total Slot files found in another backend's slot "
        "directory (a replica's) on a miss, by what became of them: linked or copied into "
        "the asking backend's directory, or why not.\n"
        "# TYPE warmslot_replica_files_total counter\n";
    for (std::size_t r = 0; r < cache::bring_results; ++r) {
        const auto result = static_cast<cache::bring_result>(r);
        text += fmt::format("warmslot_replica_files_total{{result=\"{}\"}} {}\n",
                            cache::name(result), disk ? disk->replica_files_total(result) : 0);
    }
    text +=
        "# HELP warmslot_shared_files_total Calls to the shared tier (cache.shared_dir): "
        "publishes after a save and fetches on a miss, by what came of them.\n"
        "# TYPE warmslot_shared_files_total counter\n";
    const auto shared = disk ? disk->shared_files_total() : std::map<std::string, std::uint64_t>{};
    for (const auto& [op, results] :
         {std::pair{"publish", std::vector<const char*>{"published", "present", "too_big",
                                                        "missing", "no_room", "too_slow", "failed",
                                                        "busy", "unavailable"}},
          std::pair{"fetch", std::vector<const char*>{"copied", "missing", "too_big", "no_room",
                                                      "too_slow", "failed", "unavailable"}}}) {
        for (const char* result : results) {
            const auto it = shared.find(std::string(op) + "/" + result);
            text += fmt::format("warmslot_shared_files_total{{op=\"{}\",result=\"{}\"}} {}\n", op,
                                result, it == shared.end() ? 0 : it->second);
        }
    }
    counter(text, "warmslot_shared_evictions_total",
            "Entries this warmslot evicted from the shared tier to keep it within "
            "cache.shared_max_disk.",
            static_cast<double>(disk ? disk->shared_evictions_total() : 0));
    gauge(text, "warmslot_slots_reserved",
          "Slots reserved now for a request or for warmslot's own work on them (priming, "
          "saving, restoring, probing); 0 whenever warmslot is idle.",
          static_cast<double>(c.reserved_slots));
    gauge(text, "warmslot_requests_in_flight",
          "Requests and slot reservations warmslot counts on its backends now (running, "
          "waiting for a slot, or preparing one); 0 whenever warmslot is idle.",
          static_cast<double>(c.in_flight));
    text +=
        "# HELP warmslot_requests_refused_total Requests warmslot refused itself, before any "
        "backend, by reason.\n"
        "# TYPE warmslot_requests_refused_total counter\n";
    for (std::size_t r = 0; r < http_server::refusal_kinds; ++r) {
        const auto why = static_cast<http_server::refusal>(r);
        text += fmt::format("warmslot_requests_refused_total{{reason=\"{}\"}} {}\n",
                            http_server::name(why), s.refusals ? s.refusals->count(why) : 0);
    }
    if (s.states) text += s.states->swap_metrics();
    answer a;
    a.content_type = "text/plain; version=0.0.4";
    a.body = std::move(text);
    return a;
}

}  // namespace warmslot::endpoints
