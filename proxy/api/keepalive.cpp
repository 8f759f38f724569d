#include "api/keepalive.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "api/errors.hpp"
#include "sse/writer.hpp"

namespace warmslot::api {

std::optional<std::chrono::milliseconds> stream_keepalive(api_shape shape,
                                                          const nlohmann::json& body,
                                                          std::chrono::milliseconds configured) {
    if (shape == api_shape::none || !body.is_object()) return std::nullopt;
    const auto stream = body.find("stream");
    if (stream == body.end() || !stream->is_boolean() || !stream->get<bool>()) return std::nullopt;
    auto interval = configured;
    const auto ping = body.find("sse_ping_interval");
    if (ping != body.end() && ping->is_number() && ping->get<double>() >= 1) {
        // Seconds, as llama-server reads them; more than a day is the same as the setting.
        const double seconds = std::min(ping->get<double>(), 86'400.0);
        interval =
            std::min(interval, std::chrono::milliseconds(static_cast<long long>(seconds * 1000)));
    }
    return interval;
}

std::string keepalive_event(error_dialect dialect) {
    if (dialect == error_dialect::anthropic)
        return sse::format_named_event("ping", R"({"type": "ping"})");
    return sse::format_comment("ping");
}

bool wants_prompt_progress(api_shape shape, const nlohmann::json& body) {
    if ((shape != api_shape::chat && shape != api_shape::completion) || !body.is_object())
        return false;
    const auto flag = [&](const char* name) {
        const auto it = body.find(name);
        return it != body.end() && it->is_boolean() && it->get<bool>();
    };
    return flag("stream") && flag("return_progress");
}

std::string prompt_progress_event(api_shape shape, const prompt_progress& p, std::string_view id,
                                  std::string_view model, std::int64_t created) {
    const nlohmann::json progress = {{"total", p.total},
                                     {"cache", p.cache},
                                     {"processed", std::min(p.processed, p.total)},
                                     {"time_ms", p.time_ms}};
    nlohmann::json event;
    if (shape == api_shape::chat) {
        event = {{"choices", nlohmann::json::array(
                                 {{{"finish_reason", nullptr},
                                   {"index", 0},
                                   {"delta", {{"role", "assistant"}, {"content", nullptr}}}}})},
                 {"created", created},
                 {"id", id},
                 {"model", model},
                 {"object", "chat.completion.chunk"},
                 {"prompt_progress", progress}};
    } else {
        event = {{"index", 0},
                 {"content", ""},
                 {"tokens", nlohmann::json::array()},
                 {"stop", false},
                 {"id_slot", -1},
                 {"tokens_predicted", 0},
                 {"tokens_evaluated", 0},
                 {"prompt_progress", progress}};
    }
    return sse::format_data_event(
        event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

namespace {

error_kind kind_of_status(unsigned status) {
    switch (status) {
        case 400: return error_kind::bad_request;
        case 401: return error_kind::unauthorized;
        case 403: return error_kind::forbidden;
        case 404: return error_kind::not_found;
        case 408: return error_kind::request_timeout;
        case 413: return error_kind::payload_too_large;
        case 415: return error_kind::unsupported_media_type;
        case 503: return error_kind::backend_unavailable;
        case 504: return error_kind::upstream_timeout;
        default: return status >= 500 ? error_kind::backend_bad_response : error_kind::bad_request;
    }
}

}  // namespace

std::string sse_error_of_answer(unsigned status, std::string_view body, error_dialect dialect) {
    const auto parsed = nlohmann::json::parse(body, nullptr, false);
    const nlohmann::json* error = nullptr;
    if (parsed.is_object()) {
        const auto it = parsed.find("error");
        if (it != parsed.end() && it->is_object()) error = &*it;
    }
    if (dialect == error_dialect::openai && error != nullptr && status >= 400) {
        // Its own bytes, as llama-server would have streamed the error event.
        const auto end = body.find_last_not_of(" \t\r\n");
        return sse::format_data_event(body.substr(0, end + 1));
    }
    std::string message;
    if (error != nullptr && error->contains("message") && (*error)["message"].is_string()) {
        message = (*error)["message"].get<std::string>();
    } else {
        message = "the backend answered the stream with status " + std::to_string(status) +
                  " and no event stream";
    }
    const auto kind = status >= 400 ? kind_of_status(status) : error_kind::backend_bad_response;
    return sse_error_event(kind, message, dialect);
}

}  // namespace warmslot::api
