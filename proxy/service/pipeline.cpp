#include "service/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "api/endpoints.hpp"
#include "api/json_parse.hpp"
#include "api/keepalive.hpp"
#include "config/reload.hpp"
#include "service/keepalive.hpp"
#include "service/relay.hpp"
#include "service/wakeup.hpp"
#include "util/escape.hpp"
#include "util/log.hpp"

namespace warmslot::service {
namespace {

std::shared_ptr<spdlog::logger> access_log() {
    static auto logger = util::module_logger("access");
    return logger;
}

// A body this large is parsed on the compute pool, and its DOM and text are freed there; a
// smaller one is parsed in place, where parsing it costs less than the two thread hops would
// (docs/benchmarks.md, "Request body parsing").
constexpr std::size_t inline_parse_bytes = 64 * 1024;

// What the compute pool hands back: the DOM, and the text it held while parsing it.
struct parsed_body {
    nlohmann::json dom;
    std::string text;
};

// On the compute pool. The text is owned here while it is parsed, so nothing it refers to can
// go away with the connection meanwhile.
awaitable<parsed_body> parse_owned(std::string text) {
    auto dom = api::parse_json(text);
    co_return parsed_body{std::move(dom), std::move(text)};
}

}  // namespace

pipeline::pipeline(const config::source& src, http_server::workers& w, routing::registry& reg,
                   tier::disk_tier* disk)
    : src_(src), reg_(reg), disk_(disk), compute_(w.compute()), rewriter_(src.current()->rewrite) {
    for (std::size_t i = 0; i < w.size(); ++i) {
        // Workers are stopped explicitly: their idle connections may keep a timer armed.
        pools_.push_back(std::make_unique<upstream::pool>(w.context(i).get_executor(), 64,
                                                          upstream::pool::idle_timers::keep));
        watches_.push_back(std::make_unique<watch_list>(w.context(i).get_executor()));
    }
    wakeups_ = std::make_shared<wakeup_hub>();
    switches_ = make_router_switches();
    holds_ = make_hold_line();
    reg_.set_listener([hub = wakeups_] { hub->notify(); });
}

pipeline::~pipeline() { reg_.set_listener(nullptr); }

// The whole request in one coroutine: a nested one for the dispatch would cost a frame each time.
awaitable<void> pipeline::handle(http_server::exchange& ex) {
    const auto start = std::chrono::steady_clock::now();
    outcome out;
    out.cfg = src_.current();
    out.cls.ep = api::classify(std::string_view(ex.request.method_string()),
                               std::string_view(ex.request.target()));
    const auto& ep = out.cls.ep;
    cors_headers(*out.cfg, ex);
    // The checks come before the body is parsed: a client without a key costs no parsing.
    const gate g = screen(*out.cfg, ep, ex.request, &out.caller);
    nlohmann::json body;
    const bool large = ex.request.body().size() >= inline_parse_bytes;
    if (g == gate::pass &&
        (ep.kind == api::endpoint_kind::forward_json || ep.kind == api::endpoint_kind::explain)) {
        if (large) {
            // Moved to the pool and back, never copied: the forwarded body is this text.
            auto parsed = co_await net::co_spawn(
                compute_, parse_owned(std::move(ex.request.body())), net::use_awaitable);
            ex.request.body() = std::move(parsed.text);
            body = std::move(parsed.dom);
        } else {
            body = api::parse_json(ex.request.body());
        }
        if (const auto m = body.find("model"); m != body.end() && m->is_string()) {
            out.cls.model = m->get<std::string>();
        }
    }
    const auto path = api::path_of(std::string_view(ex.request.target()));
    if (ex.request.method() == http::verb::options && g != gate::misdirected &&
        g != gate::cross_site) {
        co_await preflight(ex, out);
    } else if (auto refused = check(ex.request, ep, g, &body)) {
        co_await fail(ex, out, refused->kind, std::move(refused->message));
    } else if (ep.kind == api::endpoint_kind::health) {
        co_await health(ex, out);
    } else if (ep.kind == api::endpoint_kind::metrics) {
        co_await metrics(ex, out);
    } else if (ep.kind == api::endpoint_kind::admin) {
        co_await admin(ex, out);
    } else if (ep.kind == api::endpoint_kind::explain) {
        co_await explain(ex, out, body);
    } else if (ep.kind == api::endpoint_kind::dashboard) {
        co_await dashboard(ex, out);
    } else if ((path == "/v1/models" || path == "/models") &&
               config::active_backends(*out.cfg) > 1) {
        co_await models(ex, out);
    } else if (const auto place =
                   tenant_limits_.enter(out.caller ? out.caller->tenant : std::string(),
                                        out.cfg->tenants.limits.concurrent_requests);
               !place) {
        co_await fail_starting(
            ex, out,
            admission{nullptr,
                      "too many requests of this tenant at once (tenants.limits."
                      "concurrent_requests: " +
                          std::to_string(out.cfg->tenants.limits.concurrent_requests) + ")",
                      std::chrono::seconds(1), api::error_kind::rate_limited});
    } else {
        const bool json_body = ep.kind == api::endpoint_kind::forward_json;
        std::optional<rewrite::result> rewritten;
        if (json_body) rewritten = apply_rewrites(ex, body, out);
        // A stream is kept alive while warmslot works before the backend answers (HTTP/1.1:
        // the early head is chunked).
        std::optional<stream_keeper> keeper;
        const auto every =
            json_body && ex.request.version() == 11
                ? api::stream_keepalive(ep.shape, body, out.cfg->timeouts.stream_keepalive)
                : std::nullopt;
        if (every) {
            keeper.emplace(ex, *every, out.cfg->timeouts.stream_idle, ep.dialect);
            out.keeper = &*keeper;
        }
        co_await forward(ex, out, json_body ? &body : nullptr);
        if (keeper) {
            // Every answer stops it first; a head left without its end closes the connection.
            if (co_await keeper->stop() && !keeper->is_ended()) ex.keep_alive = false;
            out.keeper = nullptr;
        }
        if (rewritten && out.status == 200 && !out.client_gone)
            rewriter_.remember(out.caller->tenant, *rewritten);
    }
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    log_access(ex, out, took.count());
    record(ex, out, body, took.count());
    // A DOM of many nodes takes milliseconds to free, and unmapping a large text is not free
    // either: neither is done on the I/O thread.
    if (large) net::post(compute_, [dom = std::move(body), text = std::move(ex.request.body())] {});
}

// Why a request is refused before it reaches a backend, if it is. `body` is the parsed JSON
// body of forward_json endpoints (null: absent or not JSON).
std::optional<rejection> pipeline::check(const http::request<http::string_body>& req,
                                         const api::endpoint& ep, gate g,
                                         const nlohmann::json* body) const {
    const std::string path(api::path_of(std::string_view(req.target())));
    switch (g) {
        case gate::pass: break;
        case gate::misdirected:
            return rejection{api::error_kind::misdirected,
                             "this warmslot does not answer for the host in the Host header "
                             "(http.allowed_hosts)"};
        case gate::cross_site:
            return rejection{api::error_kind::forbidden,
                             "cross-site request refused: its Origin is not this server's and "
                             "not in http.cors_origins"};
        case gate::unauthorized:
            return rejection{api::error_kind::unauthorized,
                             "missing or invalid API key (send Authorization: Bearer <key> or "
                             "x-api-key: <key>)"};
        case gate::forbidden:
            return rejection{api::error_kind::forbidden,
                             "this API key's role may not call " + path};
        case gate::media_type:
            return rejection{api::error_kind::unsupported_media_type,
                             "the request body must be sent with Content-Type: application/json"};
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
        case api::endpoint_kind::forward_json:
        case api::endpoint_kind::explain:
            if (!body || body->is_discarded()) {
                return rejection{api::error_kind::invalid_json,
                                 "request body is not valid JSON, or nests arrays and objects "
                                 "deeper than " +
                                     std::to_string(api::max_json_depth) + " levels"};
            }
            if (!body->is_object()) {
                return rejection{api::error_kind::bad_request,
                                 "request body must be a JSON object"};
            }
            return std::nullopt;
        case api::endpoint_kind::health:
        case api::endpoint_kind::metrics:
        case api::endpoint_kind::admin:
        case api::endpoint_kind::dashboard:
        case api::endpoint_kind::forward_get: return std::nullopt;
    }
    return std::nullopt;
}

awaitable<void> pipeline::fail(http_server::exchange& ex, outcome& out, api::error_kind kind,
                               std::string message) {
    const auto info = api::describe(kind);
    out.status = info.status;
    out.error = kind;
    if (kind == api::error_kind::unauthorized && refusals_) {
        refusals_->add(http_server::refusal::unauthorized);
    }
    if (out.keeper && co_await out.keeper->stop()) {
        co_await fail_in_stream(ex, out, api::sse_error_event(kind, message, out.cls.ep.dialect));
        co_return;
    }
    auto ec = co_await http_server::write_json(ex, info.status,
                                               api::error_body(kind, message, out.cls.ep.dialect),
                                               out.cfg->timeouts.stream_idle);
    if (ec) ex.keep_alive = false;
}

awaitable<void> pipeline::fail_starting(http_server::exchange& ex, outcome& out,
                                        const admission& a) {
    const auto kind = a.kind;
    out.status = api::describe(kind).status;
    out.error = kind;
    if (out.keeper && co_await out.keeper->stop()) {
        co_await fail_in_stream(ex, out, api::sse_error_event(kind, a.error, out.cls.ep.dialect));
        co_return;
    }
    http::response<http::string_body> res{static_cast<http::status>(out.status), 11};
    res.set(http::field::content_type, "application/json; charset=utf-8");
    res.set(http::field::retry_after,
            std::to_string(std::max<long long>(1, a.retry_after.count())));
    res.set("X-Warmslot-Request-Id", ex.id);
    res.keep_alive(ex.keep_alive);
    res.body() = api::error_body(kind, a.error, out.cls.ep.dialect);
    res.prepare_payload();
    ex.client->expires_after(out.cfg->timeouts.stream_idle);
    const auto ec = co_await http_server::write_message(*ex.client, res);
    ex.client->expires_never();
    if (ec) ex.keep_alive = false;
}

// An error once the stream's head went out early: one error event and the stream's end. The
// access line gives the status the error would have had.
awaitable<void> pipeline::fail_in_stream(http_server::exchange& ex, outcome& out,
                                         std::string event) {
    std::string bytes = fmt::format("{:x}\r\n{}\r\n", event.size(), event);
    bytes += http_server::serialized_last_chunk(http::fields{});
    ex.client->expires_after(out.cfg->timeouts.stream_idle);
    auto [ec, n] = co_await net::async_write(*ex.client, net::buffer(bytes), nothrow);
    out.bytes_out += event.size();
    out.keeper->ended();
    if (ec) ex.keep_alive = false;
}

void pipeline::log_access(const http_server::exchange& ex, const outcome& out, double ms) const {
    if (!out.cfg->log.access) return;
    const auto& req = ex.request;
    std::string cache = "-";
    if (out.stats) {
        const auto request = static_cast<std::uint64_t>(std::max(0L, out.stats->processed));
        cache = fmt::format("cached={} processed={}", out.stats->cached, request + out.disk.primed);
        // The parts, when warmslot primed the slot before the request.
        if (out.disk.primed > 0)
            cache += fmt::format(" (prime={}, request={})", out.disk.primed, request);
    }
    const auto disk = describe(out.disk);
    // A request refused for its key is a refusal: its line names the client, as the server's do.
    std::string peer;
    if (out.error == api::error_kind::unauthorized) {
        error_code ec;
        const auto ep = ex.client->socket().remote_endpoint(ec);
        peer = ec ? " refused=unauthorized peer=-"
                  : fmt::format(" refused=unauthorized peer={}{}{}:{}",
                                ep.address().is_v6() ? "[" : "", ep.address().to_string(),
                                ep.address().is_v6() ? "]" : "", ep.port());
    }
    access_log()->info(
        "req={} {} {} {} backend={} slot={} route=\"{}\"{}{}{} {} bytes={} ms={:.1f}{}{}{}", ex.id,
        util::escape_controls(std::string_view(req.method_string())),
        util::escape_controls(std::string_view(req.target())), out.status,
        out.backend.empty() ? "-" : out.backend, out.slot ? std::to_string(*out.slot) : "-",
        out.route.empty() ? "-" : out.route,
        out.waited.empty() ? "" : " waited=\"" + out.waited + "\"",
        disk.empty() ? "" : " disk=\"" + disk + "\"",
        out.rewrites.empty() ? "" : " rewrites=\"" + out.rewrites + "\"", cache, out.bytes_out, ms,
        out.error ? fmt::format(" error={}", api::name(*out.error)) : "",
        out.client_gone ? " client_gone" : "", peer);
}

}  // namespace warmslot::service
