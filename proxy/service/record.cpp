// What the dashboard remembers of each request (record(), where the access line is written),
// and the answers of warmslot's own endpoints (endpoints/), written here: GET /warmslot/ (the
// page), /warmslot/<file> (its script and style sheet), /warmslot/status (the JSON the page
// and `warmslot status` read; it needs an API key when keys are set, the page's files hold no
// data and do not), /health, /metrics and /v1/models across several backends.
#include <chrono>
#include <nlohmann/json.hpp>

#include "api/endpoints.hpp"
#include "api/json_parse.hpp"
#include "endpoints/endpoints.hpp"
#include "service/pipeline.hpp"
#include "status/status.hpp"

namespace warmslot::service {
namespace {

// The page's own calls and scrapes are not what a person looks for in the request list.
bool recorded(std::string_view path) {
    if (path == "/metrics" || path == "/health" || path == "/v1/health") return false;
    return path == "/warmslot/explain" || !(path == "/warmslot" || path.starts_with("/warmslot/"));
}

// What a warm-up puts on its slot: its longest text (POST /admin/warm).
std::string warm_preview(const std::string& body) {
    const auto j = api::parse_json(body);
    if (!j.is_object()) return "";
    std::string best;
    if (j.contains("system") && j["system"].is_string()) best = j["system"].get<std::string>();
    if (j.contains("documents") && j["documents"].is_array()) {
        for (const auto& d : j["documents"]) {
            if (d.is_string() && d.get_ref<const std::string&>().size() > best.size())
                best = d.get<std::string>();
        }
    }
    return status::preview_text(best, status::preview_chars);
}

}  // namespace

void pipeline::record(const http_server::exchange& ex, const outcome& out,
                      const nlohmann::json& body, double ms) {
    const auto& cfg = *out.cfg;
    const auto path = api::path_of(std::string_view(ex.request.target()));
    if (!cfg.dashboard.enabled || !recorded(path)) return;
    status::request_record r;
    r.at_ms = status::unix_ms();
    r.id = ex.id;
    r.method = std::string(ex.request.method_string());
    r.path = std::string(path);
    r.status = out.status;
    r.backend = out.backend;
    r.slot = out.slot;
    r.route = out.route;
    r.disk = describe(out.disk);
    r.rewrites = out.rewrites;
    if (out.stats) {
        r.cached = out.stats->cached;
        r.processed = out.stats->processed + static_cast<long>(out.disk.primed);
        r.prompt_ms = out.stats->prompt_ms;
        r.saved_seconds = reg_.totals().prefill_seconds_saved;  // a running total: see activity
    }
    r.ms = ms;
    if (out.error) r.error = std::string(api::name(*out.error));
    r.client_gone = out.client_gone;
    if (out.caller) r.tenant = out.caller->tenant;
    if (cfg.dashboard.previews && out.slot && out.status == 200 && !out.backend.empty()) {
        status::slot_preview p;
        p.at_ms = r.at_ms;
        p.tenant = r.tenant;
        const std::string_view label(ex.request["X-Warmslot-Label"]);
        if (!label.empty()) {
            p.text = status::preview_text(label, status::preview_chars);
            p.label = true;
        } else {
            p.text = path == "/admin/warm" ? warm_preview(ex.request.body())
                                           : status::body_preview(body);
        }
        if (!p.text.empty()) activity_.set_preview(out.backend, *out.slot, std::move(p));
    }
    activity_.record(std::move(r));
}

awaitable<void> pipeline::dashboard(http_server::exchange& ex, outcome& out) {
    const auto path = api::path_of(std::string_view(ex.request.target()));
    if (!out.cfg->dashboard.enabled) {
        co_await fail(ex, out, api::error_kind::not_found,
                      "the dashboard is off (dashboard.enabled: false)");
        co_return;
    }
    if (path != "/warmslot/status") {
        co_await reply(ex, out, endpoints::dashboard_file(path));
        co_return;
    }
    // An admin sees every tenant; anyone else only what its tenant's requests did.
    const bool all = !out.caller || out.caller->role == config::key_role::admin;
    const auto holds = holds_;
    co_await reply(ex, out,
                   co_await endpoints::status_json(
                       own_sources(out), activity_, all ? nullptr : &out.caller->tenant,
                       [holds](int backend) { return held_for(*holds, backend); }));
}

// Writes an answer of warmslot's own endpoints (endpoints/endpoints.hpp).
awaitable<void> pipeline::reply(http_server::exchange& ex, outcome& out, endpoints::answer a) {
    const auto& cfg = *out.cfg;
    if (a.error) {
        co_await fail(ex, out, *a.error, std::move(a.body));
        co_return;
    }
    out.status = a.status;
    if (a.json()) {
        const auto ec = co_await http_server::write_json(ex, a.status, std::move(a.body),
                                                         cfg.timeouts.stream_idle);
        if (ec) ex.keep_alive = false;
        co_return;
    }
    http::response<http::string_body> res{static_cast<http::status>(a.status), 11};
    res.set(http::field::content_type, a.content_type);
    res.set(http::field::cache_control, "no-store");
    for (const auto& [name, value] : a.headers) res.set(name, value);
    res.set("X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : ex.response_headers) res.set(name, value);
    res.set("X-Warmslot-Request-Id", ex.id);
    res.keep_alive(ex.keep_alive);
    res.body() = std::move(a.body);
    res.prepare_payload();
    ex.client->expires_after(cfg.timeouts.stream_idle);
    const auto ec = co_await http_server::write_message(*ex.client, res);
    ex.client->expires_never();
    if (ec) ex.keep_alive = false;
}

endpoints::sources pipeline::own_sources(const outcome& out) const {
    return {out.cfg.get(), &reg_, disk_, starter_, refusals_};
}

awaitable<void> pipeline::health(http_server::exchange& ex, outcome& out) {
    // Without a valid key (the header checks of service/gate.cpp), no backend is named or asked.
    co_await reply(
        ex, out,
        co_await endpoints::health(own_sources(out), *pools_[ex.worker], out.caller != nullptr));
}

awaitable<void> pipeline::models(http_server::exchange& ex, outcome& out) {
    co_await reply(ex, out, co_await endpoints::models(own_sources(out), *pools_[ex.worker]));
}

awaitable<void> pipeline::metrics(http_server::exchange& ex, outcome& out) {
    co_await reply(ex, out, endpoints::metrics(own_sources(out)));
}

}  // namespace warmslot::service
