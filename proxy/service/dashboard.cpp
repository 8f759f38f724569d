// The dashboard: GET /warmslot/ (the page), GET /warmslot/<file> (its script and style sheet,
// built into the binary) and GET /warmslot/status (the JSON the page and `warmslot status`
// read; it needs an API key when keys are set, the page's files hold no data and do not).
// The JSON is built by status/status.cpp from the registry, the disk index (read on the index
// thread) and the activity that record() feeds once per request.
#include <chrono>
#include <nlohmann/json.hpp>

#include "api/json_parse.hpp"
#include "api/endpoints.hpp"
#include "service/pipeline.hpp"
#include "status/assets.hpp"
#include "status/status.hpp"

namespace warmslot::service {
namespace {

std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

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

std::vector<status::disk_dir> disk_dirs(const config::config& cfg,
                                        std::vector<tier::disk_listing> listed) {
    std::vector<status::disk_dir> out;
    for (auto& l : listed) {
        status::disk_dir d{l.dir, {}, cfg.cache.max_disk, std::move(l.files)};
        for (const auto& b : cfg.backends) {
            if (!b.retired && b.slot_save_path == l.dir) d.backends.push_back(b.name);
        }
        out.push_back(std::move(d));
    }
    return out;
}

}  // namespace

void pipeline::record(const http_server::exchange& ex, const outcome& out,
                      const nlohmann::json& body, double ms) {
    const auto& cfg = *out.cfg;
    const auto path = api::path_of(std::string_view(ex.request.target()));
    if (!cfg.dashboard.enabled || !recorded(path)) return;
    status::request_record r;
    r.at_ms = unix_ms();
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
    const auto& cfg = *out.cfg;
    auto path = api::path_of(std::string_view(ex.request.target()));
    if (!cfg.dashboard.enabled) {
        co_await fail(ex, out, api::error_kind::not_found,
                      "the dashboard is off (dashboard.enabled: false)");
        co_return;
    }
    if (path == "/warmslot/status") {
        status::status_input in;
        in.cfg = &cfg;
        in.views = reg_.snapshot();
        for (std::size_t i = 0; i < in.views.size(); ++i) {
            in.infos.push_back(reg_.info(static_cast<int>(i)));
            in.asleep.push_back(reg_.asleep(static_cast<int>(i)));
            in.held.push_back(held_for(*holds_, static_cast<int>(i)));
        }
        in.totals = reg_.totals();
        if (disk_) in.totals.prompt_tokens_processed += disk_->primed_tokens_total();
        if (disk_) in.disk = disk_dirs(cfg, co_await disk_->listing());
        in.now_ms = unix_ms();
        in.now = routing::clock::now();
        // An admin sees every tenant; anyone else only what its tenant's requests did.
        const bool all = !out.caller || out.caller->role == config::key_role::admin;
        in.activity = activity_.view(in.now_ms, all ? nullptr : &out.caller->tenant);
        in.tenant = all ? nullptr : &out.caller->tenant;
        out.status = 200;
        auto doc = status::build_status(in);
        if (starter_) doc["swaps"] = starter_->swap_status();
        auto ec = co_await http_server::write_json(
            ex, 200, doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
            cfg.timeouts.stream_idle);
        if (ec) ex.keep_alive = false;
        co_return;
    }
    const auto name = path == "/warmslot" || path == "/warmslot/" ? std::string_view("index.html")
                                                                  : path.substr(10);
    const auto asset = status::find_asset(name);
    if (!asset) {
        co_await fail(ex, out, api::error_kind::not_found, "unknown endpoint " + std::string(path));
        co_return;
    }
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, asset->content_type);
    res.set(http::field::cache_control, "no-store");
    // Everything the page needs comes from warmslot itself.
    res.set("Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "connect-src 'self'; frame-ancestors 'none'");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("X-Warmslot-Request-Id", ex.id);
    res.keep_alive(ex.keep_alive);
    res.body() = std::string(asset->body);
    res.prepare_payload();
    out.status = 200;
    ex.client->expires_after(cfg.timeouts.stream_idle);
    auto [ec, n] = co_await http::async_write(*ex.client, res, nothrow);
    if (ec) ex.keep_alive = false;
}

}  // namespace warmslot::service
