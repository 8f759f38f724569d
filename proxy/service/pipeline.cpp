#include "service/pipeline.hpp"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <chrono>

#include "api/endpoints.hpp"
#include "util/secrets.hpp"

namespace warmslot::service {
namespace {

std::shared_ptr<spdlog::logger> access_log() {
    static auto logger = [] {
        auto l = spdlog::get("access");
        return l ? l : spdlog::default_logger()->clone("access");
    }();
    return logger;
}

std::string_view bearer_token(std::string_view header) {
    constexpr std::string_view prefix = "Bearer ";
    if (header.size() > prefix.size() && header.substr(0, prefix.size()) == prefix) {
        return header.substr(prefix.size());
    }
    return {};
}

}  // namespace

pipeline::pipeline(const config::config& cfg, http_server::workers& w) : cfg_(cfg) {
    for (std::size_t i = 0; i < w.size(); ++i) {
        pools_.push_back(std::make_unique<upstream::pool>(w.context(i).get_executor()));
    }
}

awaitable<void> pipeline::handle(http_server::exchange& ex) {
    const auto start = std::chrono::steady_clock::now();
    outcome out;
    co_await dispatch(ex, out);
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    log_access(ex, out, took.count());
}

// Why a request is refused before it reaches a backend, if it is.
std::optional<rejection> pipeline::check(const http::request<http::string_body>& req,
                                         const api::endpoint& ep) const {
    const std::string path(api::path_of(std::string_view(req.target())));
    if (ep.needs_auth && !authorized(req)) {
        return rejection{api::error_kind::unauthorized,
                         "missing or invalid API key (send Authorization: Bearer <key>)"};
    }
    switch (ep.kind) {
        case api::endpoint_kind::not_found:
            return rejection{api::error_kind::not_found, "unknown endpoint " + path};
        case api::endpoint_kind::slot_action:
            return rejection{api::error_kind::not_found,
                             "slot actions are managed by warmslot and not exposed"};
        case api::endpoint_kind::method_not_allowed:
            return rejection{api::error_kind::method_not_allowed,
                             std::string(req.method_string()) + " is not allowed on " + path};
        case api::endpoint_kind::forward_json: {
            const auto body = nlohmann::json::parse(req.body(), nullptr, false);
            if (body.is_discarded()) {
                return rejection{api::error_kind::invalid_json, "request body is not valid JSON"};
            }
            if (!body.is_object()) {
                return rejection{api::error_kind::bad_request, "request body must be a JSON object"};
            }
            return std::nullopt;
        }
        case api::endpoint_kind::health:
        case api::endpoint_kind::forward_get:
            return std::nullopt;
    }
    return std::nullopt;
}

awaitable<void> pipeline::dispatch(http_server::exchange& ex, outcome& out) {
    const auto ep = api::classify(std::string_view(ex.request.method_string()),
                                  std::string_view(ex.request.target()));
    if (auto refused = check(ex.request, ep)) {
        co_await fail(ex, out, refused->kind, std::move(refused->message));
    } else if (ep.kind == api::endpoint_kind::health) {
        co_await health(ex, out);
    } else {
        co_await forward(ex, out);
    }
}

bool pipeline::authorized(const http::request<http::string_body>& req) const {
    if (cfg_.api_keys.empty()) return true;
    std::string_view given = bearer_token(std::string_view(req[http::field::authorization]));
    if (given.empty()) given = std::string_view(req["X-Api-Key"]);
    return !given.empty() && util::matches_any_key(given, cfg_.api_keys);
}

awaitable<void> pipeline::fail(http_server::exchange& ex, outcome& out, api::error_kind kind,
                               std::string message) {
    const auto info = api::describe(kind);
    out.status = info.status;
    out.error = kind;
    auto ec = co_await http_server::write_json(*ex.client, info.status,
                                               api::error_body(kind, message), ex.keep_alive,
                                               ex.id, cfg_.timeouts.stream_idle);
    if (ec) ex.keep_alive = false;
}

awaitable<void> pipeline::health(http_server::exchange& ex, outcome& out) {
    auto& pool = *pools_[ex.worker];
    nlohmann::json backends = nlohmann::json::array();
    bool any_ok = false;
    for (const auto& b : cfg_.backends) {
        const auto timeout = std::min(cfg_.timeouts.connect, std::chrono::milliseconds(3000));
        auto [ec, conn] = co_await pool.acquire(b.host, b.port, timeout);
        unsigned status = 0;
        if (!ec) {
            http::request<http::empty_body> req{http::verb::get, "/health", 11};
            req.set(http::field::host, conn->key);
            conn->stream.expires_after(timeout);
            std::tie(ec, std::ignore) = co_await http::async_write(conn->stream, req, nothrow);
            http::response<http::string_body> res;
            if (!ec) std::tie(ec, std::ignore) =
                co_await http::async_read(conn->stream, conn->buffer, res, nothrow);
            if (!ec) {
                status = res.result_int();
                if (res.keep_alive()) pool.release(std::move(conn));
            }
        }
        const char* state = status == 200 ? "ok" : status == 503 ? "loading" : "unreachable";
        any_ok = any_ok || status == 200;
        backends.push_back({{"name", b.name}, {"url", b.url}, {"status", state},
                            {"http_status", status}});
    }
    nlohmann::json report = {{"status", any_ok ? "ok" : "unavailable"},
                             {"warmslot", {{"status", "ok"}}},
                             {"backends", backends}};
    out.status = any_ok ? 200 : 503;
    auto ec = co_await http_server::write_json(*ex.client, out.status, report.dump(),
                                               ex.keep_alive, ex.id, cfg_.timeouts.stream_idle);
    if (ec) ex.keep_alive = false;
}

void pipeline::log_access(const http_server::exchange& ex, const outcome& out, double ms) const {
    if (!cfg_.log.access) return;
    const auto& req = ex.request;
    std::string cache = "-";
    if (out.stats) cache = fmt::format("cached={} processed={}", out.stats->cached,
                                       out.stats->processed);
    access_log()->info("req={} {} {} {} backend={} {} bytes={} ms={:.1f}{}{}", ex.id,
                       std::string_view(req.method_string()), std::string_view(req.target()),
                       out.status, out.backend.empty() ? "-" : out.backend, cache, out.bytes_out,
                       ms, out.error ? fmt::format(" error={}", api::name(*out.error)) : "",
                       out.client_gone ? " client_gone" : "");
}

}  // namespace warmslot::service
