// Request rewriting in the request path, and POST /warmslot/explain: the same body as a real
// call, answered with the rewritten request and the planner's decision; nothing is run and no
// slot is reserved.
#include <nlohmann/json.hpp>

#include "api/endpoints.hpp"
#include "routing/fingerprint.hpp"
#include "service/pipeline.hpp"
#include "util/log.hpp"

namespace warmslot::service {
namespace {

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("rewrite");
    return logger;
}

// The rules never fail a request: a rule that throws (a regex over its complexity limit) leaves
// the body as the client sent it.
std::optional<rewrite::result> try_apply(const rewrite::rewriter& r, const nlohmann::json& body,
                                         const outcome& out, const std::string& request_id,
                                         bool& failed) {
    try {
        return r.apply(out.caller ? std::string_view(out.caller->tenant) : std::string_view(), body,
                       out.cls.model);
    } catch (const std::exception& e) {
        log()->warn("req={} rewrite skipped: {}", request_id, e.what());
        failed = true;
        return std::nullopt;
    }
}

}  // namespace

// The rewritten body replaces the client's, so the fingerprint, the plan, the disk tier and the
// backend all see the request as it is sent. Chat bodies, and Messages and Responses bodies
// through their chat form (rewrite/shapes.cpp).
std::optional<rewrite::result> pipeline::apply_rewrites(http_server::exchange& ex,
                                                        nlohmann::json& body, outcome& out) {
    const auto shape = out.cls.ep.shape;
    bool failed = false;
    std::optional<rewrite::result> r;
    switch (shape) {
        case api::api_shape::chat: r = try_apply(rewriter_, body, out, ex.id, failed); break;
        case api::api_shape::messages:
            r = try_apply(rewriter_, rewrite::messages_to_chat(body), out, ex.id, failed);
            break;
        case api::api_shape::responses:
            r = try_apply(rewriter_, rewrite::responses_to_chat(body), out, ex.id, failed);
            break;
        case api::api_shape::completion:
        case api::api_shape::none: return std::nullopt;
    }
    if (failed) out.rewrites = "skipped";
    if (!r) return std::nullopt;
    out.rewrites = rewrite::describe(r->applied);
    if (r->changed()) {
        if (shape == api::api_shape::messages)
            body = rewrite::chat_to_messages(std::move(r->body));
        else if (shape == api::api_shape::responses)
            body = rewrite::chat_to_responses(std::move(r->body), body);
        else
            body = std::move(r->body);
        ex.request.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    r->body = nullptr;  // only the memory update is kept until the answer
    return r;
}

awaitable<void> pipeline::explain(http_server::exchange& ex, outcome& out, nlohmann::json& body) {
    const auto& cfg = *out.cfg;
    nlohmann::json report = nlohmann::json::object();
    nlohmann::json rewrites = nullptr;  // null: no rule is on for this model
    bool failed = false;
    if (auto r = try_apply(rewriter_, body, out, ex.id, failed)) {
        rewrites = r->applied;
        report["x_warmslot_rewrites"] = rewrite::describe(r->applied);
        body = std::move(r->body);
    }
    if (failed) rewrites = "skipped";
    report["rewrites"] = std::move(rewrites);
    std::optional<routing::fingerprint> fp;
    if (cfg.routing.enabled) {
        if (body.contains("messages"))
            fp = routing::fingerprint_request(routing::request_kind::chat, body);
        else if (body.contains("prompt"))
            fp = routing::fingerprint_request(routing::request_kind::completion, body);
    }
    const std::string model = reg_.multi_model() ? out.cls.model : std::string();
    // A client or observer plans against its own tenant's slots only: explain must not tell
    // whether another tenant sent a prompt (an admin sees what a request would really get).
    // Under tenant isolation everyone's request is planned that way, an admin's too.
    const bool all = !out.caller || out.caller->role == config::key_role::admin;
    const std::string tenant = out.caller ? out.caller->tenant : std::string();
    const bool isolated = cfg.cache.isolated();
    const auto p = reg_.preview(fp ? &*fp : nullptr, model, routing::clock::now(),
                                all && !isolated ? nullptr : &tenant, isolated);
    nlohmann::json plan = {
        {"route", std::string(routing::name(p.why))},
        {"backend", p.backend >= 0
                        ? nlohmann::json(cfg.backends[static_cast<std::size_t>(p.backend)].name)
                        : nlohmann::json(nullptr)},
        {"slot", p.slot ? nlohmann::json(*p.slot) : nlohmann::json(nullptr)},
        {"matched_levels", p.matched_levels},
        {"expected_cached_tokens", p.expected_cached_tokens},
        {"unknown_model", p.unknown_model}};
    if (p.why == routing::route::miss_diverged) plan["diverged_at"] = p.diverged_at;
    if (fp) {
        plan["levels"] = fp->levels.size();
        plan["stable_levels"] = fp->stable_levels;
        plan["bytes"] = fp->total_bytes;
    }
    report["plan"] = std::move(plan);
    report["request"] = std::move(body);
    out.status = 200;
    auto ec = co_await http_server::write_json(
        ex, 200, report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        cfg.timeouts.stream_idle);
    if (ec) ex.keep_alive = false;
}

}  // namespace warmslot::service
