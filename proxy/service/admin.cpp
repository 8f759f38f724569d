// warmslot's admin endpoints (they need an API key when keys are configured, like the API):
//   POST /admin/snapshot  save the valuable prefixes idle slots hold (disk_tier::save_valuable)
//   POST /admin/warm      prime and save a system prompt and documents ahead of time
// Request shapes and the warm-up's message layout: api/admin.hpp.
#include "api/admin.hpp"

#include <nlohmann/json.hpp>

#include "api/json_parse.hpp"
#include "api/warm_progress.hpp"
#include "service/pipeline.hpp"
#include "service/relay.hpp"
#include "sse/writer.hpp"
#include "upstream/llama_client.hpp"
#include "util/log.hpp"

namespace warmslot::service {
namespace {

std::shared_ptr<spdlog::logger> admin_log() {
    static auto logger = util::module_logger("cache");
    return logger;
}

// A question the warm-up request ends with: only there to close the stable prefix.
constexpr std::string_view warm_question = "?";

// How often a streamed warm-up reports, and how long one look at the slot may take (llama-server
// answers GET /slots between two batches of the prefill).
constexpr std::chrono::seconds progress_every{1};
constexpr std::chrono::seconds slots_timeout{60};

// One SSE event as a chunk of the answer's body.
std::string chunk_of(const std::string& event) {
    return fmt::format("{:x}\r\n{}\r\n", event.size(), event);
}

// The progress reports of a streamed warm-up: a coroutine beside the warm-up on the request's
// worker, stopped (and waited for) before the final report is written.
struct progress_feed {
    explicit progress_feed(const net::any_io_executor& ex) : tick(ex), idle(ex) {}
    net::steady_timer tick;
    net::steady_timer idle;  // cancelled when the feed ends: what stop waits on
    bool stopping = false;
    bool running = true;
};

awaitable<void> feed_progress(std::shared_ptr<progress_feed> f, http_server::exchange* ex,
                              config::snapshot cfg, upstream::pool* pool, const tier::warm_watch* w,
                              const bool* gone) {
    std::string last;
    while (!f->stopping) {
        f->tick.expires_after(progress_every);
        co_await f->tick.async_wait(nothrow);
        // Once the client left, no more looks at the slot: llama-server notices a closed
        // connection only when no other answer wakes its wait for a whole second, so frequent
        // GET /slots would keep the cut priming running.
        if (f->stopping || w->backend < 0 || *gone) continue;
        const auto& b = cfg->backends[static_cast<std::size_t>(w->backend)];
        api::warm_progress p{"prefill", 0, w->total, b.name, w->slot};
        if (w->now == tier::warm_watch::phase::save) {
            p.phase = "save";
            p.done = w->total;
        } else {
            const auto r =
                co_await upstream::call(*pool, b, http::verb::get, "/slots", "", slots_timeout);
            if (f->stopping) break;
            if (r.ec || r.status != 200) continue;
            p.done = std::min(api::slot_tokens(r.body, w->slot).value_or(0), w->total);
        }
        const auto event = sse::format_named_event("progress", api::to_json(p).dump());
        if (event == last) continue;
        last = event;
        ex->client->expires_after(cfg->timeouts.stream_idle);
        auto [ec, n] =
            co_await net::async_write(*ex->client, net::buffer(chunk_of(event)), nothrow);
        if (ec) break;  // the client is gone: its watch cuts the priming
    }
    f->running = false;
    f->idle.cancel();
}

}  // namespace

// POST /admin/warm with Accept: text/event-stream: the warm-up's progress, then its report, in
// one stream (api/warm_progress.hpp). A client that leaves cuts the priming: its connection to
// llama-server is closed, which cancels the prefill there.
awaitable<void> pipeline::warm_streamed(http_server::exchange& ex, outcome& out,
                                        api::warm_request w) {
    auto& pool = *pools_[ex.worker];
    http::response_header<> h;
    h.version(11);
    h.result(http::status::ok);
    h.set(http::field::content_type, "text/event-stream");
    h.set(http::field::cache_control, "no-store");
    h.set("X-Warmslot-Request-Id", ex.id);
    for (const auto& [name, value] : ex.response_headers) h.set(name, value);
    h.set(http::field::transfer_encoding, "chunked");
    if (!ex.keep_alive) h.set(http::field::connection, "close");
    out.status = 200;
    ex.client->expires_after(out.cfg->timeouts.stream_idle);
    auto [ec, n] = co_await net::async_write(*ex.client,
                                             net::buffer(http_server::serialized_head(h)), nothrow);
    if (ec) co_return void(ex.keep_alive = false);
    forward_state st;  // its watch closes st.current, the priming call's connection
    tier::warm_watch watch;
    watch.in_flight = &st.current;
    auto feed = std::make_shared<progress_feed>(ex.client->get_executor());
    net::co_spawn(ex.client->get_executor(),
                  feed_progress(feed, &ex, out.cfg, &pool, &watch, &st.client_gone), net::detached);
    std::variant<tier::slot_report, tier::warm_error> result;
    {
        const watch_list::entry watched(*watches_[ex.worker], *ex.client, st);
        result =
            co_await disk_->warm({pool, out.cfg}, api::warm_chat_body(w, warm_question), w.model,
                                 out.caller ? out.caller->tenant : std::string(), &watch);
    }
    feed->stopping = true;
    feed->tick.cancel();
    while (feed->running) {
        feed->idle.expires_at(net::steady_timer::time_point::max());
        co_await feed->idle.async_wait(nothrow);
    }
    std::string last;
    if (auto* e = std::get_if<tier::warm_error>(&result)) {
        out.error = e->kind;
        last = sse::format_named_event("error", api::error_body(e->kind, e->message));
    } else {
        const auto& r = std::get<tier::slot_report>(result);
        out.backend = r.backend;
        out.slot = r.slot;
        last = sse::format_named_event("report", to_json(r).dump());
    }
    if (st.client_gone) {
        admin_log()->info("req={} admin warm: the client left; the priming was cut", ex.id);
        co_return void(ex.keep_alive = false);
    }
    const std::string bytes = chunk_of(last) + http_server::serialized_last_chunk(http::fields{});
    ex.client->expires_after(out.cfg->timeouts.stream_idle);
    std::tie(ec, n) = co_await net::async_write(*ex.client, net::buffer(bytes), nothrow);
    out.bytes_out += last.size();
    if (ec) ex.keep_alive = false;
}

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
            auto one = co_await disk_->save_valuable({pool, out.cfg}, b);
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
        if (ex.request[http::field::accept].find("text/event-stream") != std::string_view::npos) {
            co_await warm_streamed(ex, out, w);
            co_return;
        }
        auto result =
            co_await disk_->warm({pool, out.cfg}, api::warm_chat_body(w, warm_question), w.model,
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
