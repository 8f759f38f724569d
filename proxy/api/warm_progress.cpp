#include "api/warm_progress.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace warmslot::api {

nlohmann::json to_json(const warm_progress& p) {
    return {{"phase", p.phase},
            {"done", p.done},
            {"total", p.total},
            {"backend", p.backend},
            {"slot", p.slot}};
}

std::optional<warm_progress> warm_progress_of(const nlohmann::json& j) {
    if (!j.is_object()) return std::nullopt;
    const auto text = [&](const char* k) {
        return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
    };
    const auto count = [&](const char* k) -> std::optional<std::uint64_t> {
        if (!j.contains(k) || !j[k].is_number_unsigned()) return std::nullopt;
        return j[k].get<std::uint64_t>();
    };
    warm_progress p;
    p.phase = text("phase");
    const auto done = count("done");
    const auto total = count("total");
    if (p.phase.empty() || !done || !total) return std::nullopt;
    p.done = *done;
    p.total = *total;
    p.backend = text("backend");
    if (j.contains("slot") && j["slot"].is_number_integer()) p.slot = j["slot"].get<int>();
    return p;
}

std::optional<std::uint64_t> slot_tokens(std::string_view slots_body, int slot) {
    const auto j = nlohmann::json::parse(slots_body, nullptr, false);
    if (!j.is_array()) return std::nullopt;
    for (const auto& s : j) {
        if (!s.is_object() || !s.contains("id") || !s["id"].is_number_integer() ||
            s["id"].get<int>() != slot) {
            continue;
        }
        const auto it = s.find("n_prompt_tokens");
        if (it == s.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
            return std::nullopt;
        return it->get<std::uint64_t>();
    }
    return std::nullopt;
}

std::string progress_line(const warm_progress& p, double tokens_per_second) {
    const std::uint64_t done = std::min(p.done, p.total);
    const unsigned percent = p.total > 0 ? static_cast<unsigned>(done * 100 / p.total) : 0;
    std::string line = fmt::format("{:<7}  {} / {} tokens  {}%", p.phase, done, p.total, percent);
    if (p.phase == "prefill" && tokens_per_second > 0 && std::isfinite(tokens_per_second)) {
        const double left = static_cast<double>(p.total - done) / tokens_per_second;
        line += fmt::format("  {:.0f} tokens/s  {:.0f} s left", tokens_per_second, left);
    }
    return line;
}

}  // namespace warmslot::api
