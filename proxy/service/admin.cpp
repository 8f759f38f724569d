// warmslot's admin endpoints (they need an API key when keys are configured, like the API):
//   POST /admin/snapshot  save the valuable prefixes idle slots hold (disk_tier::save_valuable)
//   POST /admin/warm      prime and save a system prompt and documents ahead of time
// Request shapes and the warm-up's message layout: api/admin.hpp.
#include "api/json_parse.hpp"
#include "api/admin.hpp"

#include <nlohmann/json.hpp>

#include "service/pipeline.hpp"
#include "util/log.hpp"

namespace warmslot::service {
namespace {

std::shared_ptr<spdlog::logger> admin_log() {
    static auto logger = util::module_logger("cache");
    return logger;
}

// A question the warm-up request ends with: only there to close the stable prefix.
constexpr std::string_view warm_question = "?";

}  // namespace

awaitable<void> pipeline::admin(http_server::exchange& ex, outcome& out) {
    const auto path = api::path_of(std::string_view(ex.request.target()));
    auto& pool = *pools_[ex.worker];
    nlohmann::json report;
    if (!disk_) {
        co_await fail(ex, out, api::error_kind::not_found, "the disk tier is not running");
        co_return;
    }
    if (path == "/admin/snapshot") {
        auto parsed = api::parse_snapshot_request(ex.request.body());
        if (auto* problem = std::get_if<std::string>(&parsed)) {
            co_await fail(ex, out, api::error_kind::bad_request, std::move(*problem));
            co_return;
        }
        const auto only = std::get<std::optional<std::string>>(parsed);
        std::vector<int> chosen;
        for (std::size_t i = 0; i < out.cfg->backends.size(); ++i) {
            if (!only || out.cfg->backends[i].name == *only) chosen.push_back(static_cast<int>(i));
        }
        if (chosen.empty()) {
            co_await fail(ex, out, api::error_kind::not_found, "unknown backend \"" + *only + "\"");
            co_return;
        }
        tier::save_report all;
        for (int b : chosen) {
            auto one = co_await disk_->save_valuable(pool, b);
            all.slots.insert(all.slots.end(), one.slots.begin(), one.slots.end());
        }
        report = to_json(all);
        admin_log()->info("req={} admin snapshot: {} saved, {} skipped", ex.id,
                          report["saved"].size(), report["skipped"].size());
    } else if (path == "/admin/warm") {
        const auto body = api::parse_json(ex.request.body());
        if (body.is_discarded()) {
            co_await fail(ex, out, api::error_kind::invalid_json, "request body is not valid JSON");
            co_return;
        }
        auto parsed = api::parse_warm_request(body);
        if (auto* problem = std::get_if<std::string>(&parsed)) {
            co_await fail(ex, out, api::error_kind::bad_request, std::move(*problem));
            co_return;
        }
        const auto& w = std::get<api::warm_request>(parsed);
        auto result = co_await disk_->warm(pool, api::warm_chat_body(w, warm_question), w.model,
                                           out.caller ? out.caller->tenant : std::string());
        if (auto* e = std::get_if<tier::warm_error>(&result)) {
            co_await fail(ex, out, e->kind, std::move(e->message));
            co_return;
        }
        const auto& r = std::get<tier::slot_report>(result);
        report = to_json(r);
        out.backend = r.backend;
        out.slot = r.slot;
        admin_log()->info("req={} admin warm: {} on {} slot {}{}", ex.id,
                          r.saved ? "saved " + std::to_string(r.tokens) + " tokens" : "not saved",
                          r.backend, r.slot, r.reason.empty() ? "" : " (" + r.reason + ")");
    } else {
        co_await fail(ex, out, api::error_kind::not_found, "unknown endpoint " + std::string(path));
        co_return;
    }
    out.status = 200;
    auto ec =
        co_await http_server::write_json(ex, 200, report.dump(), out.cfg->timeouts.stream_idle);
    if (ex.keep_alive && ec) ex.keep_alive = false;
}

}  // namespace warmslot::service
