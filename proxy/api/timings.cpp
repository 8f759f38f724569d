#include "api/timings.hpp"

#include <nlohmann/json.hpp>

namespace warmslot::api {

bool may_carry_stats(std::string_view json) noexcept {
    return json.find("\"timings\"") != std::string_view::npos ||
           json.find("\"usage\"") != std::string_view::npos;
}

std::optional<prompt_stats> find_prompt_stats(std::string_view json) {
    const auto doc = nlohmann::json::parse(json, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
    if (auto t = doc.find("timings"); t != doc.end() && t->is_object() && t->contains("prompt_n")) {
        prompt_stats s;
        s.cached = t->value("cache_n", 0L);
        s.processed = t->value("prompt_n", 0L);
        s.predicted = t->value("predicted_n", 0L);
        s.prompt_ms = t->value("prompt_ms", 0.0);
        return s;
    }
    if (auto u = doc.find("usage"); u != doc.end() && u->is_object() && u->contains("prompt_tokens")) {
        prompt_stats s;
        const long total = u->value("prompt_tokens", 0L);
        if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
            s.cached = d->value("cached_tokens", 0L);
        }
        s.processed = total - s.cached;
        s.predicted = u->value("completion_tokens", 0L);
        return s;
    }
    return std::nullopt;
}

}  // namespace warmslot::api
