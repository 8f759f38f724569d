#include "status/status.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

namespace warmslot::status {
namespace {

using nlohmann::json;

// The text of a message content: a string (viewed in place: documents are long, and this runs
// once per request), or the text parts of an array joined into `joined`.
std::string_view text_of(const json& content, std::string& joined) {
    if (content.is_string()) return content.get_ref<const std::string&>();
    joined.clear();
    if (!content.is_array()) return joined;
    for (const auto& part : content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
            if (!joined.empty()) joined += ' ';
            joined += part["text"].get_ref<const std::string&>();
        }
    }
    return joined;
}

json opt(const std::optional<long>& v) { return v ? json(*v) : json(nullptr); }

const char* work_name(routing::slot_work w) {
    switch (w) {
        case routing::slot_work::running: return "running";
        case routing::slot_work::priming: return "priming";
        case routing::slot_work::restoring: return "restoring";
        case routing::slot_work::saving: return "saving";
        case routing::slot_work::none: break;
    }
    return "";
}

// What the slot does now (null: nothing): warmslot's own work or a task llama-server runs
// there, the prompt tokens done so far (from GET /slots), the total when known, and for how
// long. Another tenant's slot shows what it does, not how far.
json work_json(const routing::slot_view& s, const status_input& in, bool others) {
    if (s.work == routing::slot_work::none) return nullptr;
    json j = {
        {"doing", work_name(s.work)}, {"done", nullptr}, {"total", nullptr}, {"seconds", 0.0}};
    if (s.work_since != routing::clock::time_point{}) {
        const std::chrono::duration<double> took = in.now - s.work_since;
        j["seconds"] = std::max(0.0, took.count());
    }
    if (others) return j;
    // A restore or a save is one call: nothing is counted while it runs.
    if (s.work == routing::slot_work::running || s.work == routing::slot_work::priming)
        j["done"] = s.work_total > 0 ? std::min(s.work_done, s.work_total) : s.work_done;
    if (s.work_total > 0) j["total"] = s.work_total;
    return j;
}

json slot_json(const routing::slot_view& s, const std::string& backend, const status_input& in,
               bool previews) {
    const bool holds = s.held_tokens > 0 || !s.held.empty();
    const bool others = in.tenant && s.owner != *in.tenant;
    json j = {{"id", s.id},
              {"state", s.busy ? "busy" : "idle"},
              {"tokens", others ? json(nullptr) : json(s.held_tokens)},
              {"scratch", s.scratch},
              {"preview", nullptr},
              {"label", false},
              {"last_use_seconds_ago", nullptr}};
    if (s.last_use != routing::clock::time_point{}) {
        const std::chrono::duration<double> ago = in.now - s.last_use;
        j["last_use_seconds_ago"] = std::max(0.0, ago.count());
    }
    j["now"] = work_json(s, in, others);
    // A preview describes what the slot holds now: none once it is believed empty.
    const auto it = in.activity.previews.find({backend, s.id});
    if (previews && holds && it != in.activity.previews.end()) {
        j["preview"] = it->second.text;
        j["label"] = it->second.label;
    }
    return j;
}

json backend_json(const status_input& in, std::size_t i, bool previews) {
    const auto& b = in.cfg->backends[i];
    const auto& v = in.views[i];
    const auto& info = i < in.infos.size() ? in.infos[i] : std::nullopt;
    json j = {{"name", b.name},
              {"url", b.supervised() ? "" : b.url},
              {"supervised", b.supervised()},
              {"healthy", v.healthy},
              {"routing", in.cfg->routing.enabled && v.pinning},
              {"pass_through_reason", pass_through_reason(*in.cfg, v, info)},
              {"in_flight", v.in_flight + (i < in.held.size() ? in.held[i] : 0)},
              {"held", i < in.held.size() ? in.held[i] : 0},
              {"prefill_tokens_per_second", v.prefill_tokens_per_second},
              {"models", v.models},
              {"model", nullptr},
              {"identity", nullptr},
              {"build", nullptr},
              {"total_slots", nullptr},
              {"n_ctx_per_slot", nullptr},
              {"asleep", i < in.asleep.size() && in.asleep[i]}};
    if (!b.router.empty()) {
        j["router"] = b.router;
        j["router_model"] = b.router_model;
    }
    if (info) {
        j["model"] = info->model_path;
        j["identity"] = info->identity;
        j["build"] = info->build_info;
        j["total_slots"] = info->total_slots;
        j["n_ctx_per_slot"] = info->n_ctx_per_slot;
    }
    json slots = json::array();
    for (const auto& s : v.slots) slots.push_back(slot_json(s, b.name, in, previews));
    j["slots"] = std::move(slots);
    return j;
}

json disk_json(const status_input& in) {
    json dirs = json::array();
    for (const auto& d : in.disk) {
        std::uint64_t used = 0;
        json files = json::array();
        auto sorted = d.files;
        std::sort(sorted.begin(), sorted.end(),
                  [](const auto& a, const auto& b) { return a.last_used > b.last_used; });
        for (const auto& f : sorted) {
            if (in.tenant && f.tenant != *in.tenant) continue;
            used += f.bytes;
            files.push_back({{"key", in.tenant ? json(nullptr) : json(f.key)},
                             {"file", in.tenant ? json(nullptr) : json(f.file)},
                             {"tokens", f.tokens},
                             {"bytes", f.bytes},
                             {"hits", f.hits},
                             {"prefill_seconds", f.prefill_seconds},
                             {"value_seconds", static_cast<double>(f.hits + 1) * f.prefill_seconds},
                             {"created", f.created},
                             {"last_used", f.last_used}});
        }
        dirs.push_back({{"dir", d.dir},
                        {"backends", d.backends},
                        {"budget_bytes", d.budget},
                        {"used_bytes", used},
                        {"files", std::move(files)}});
    }
    return {{"enabled", in.cfg->cache.enabled},
            {"restores", in.activity.disk.restores},
            {"restore_failures", in.activity.disk.restore_failures},
            {"snapshots", in.activity.disk.snapshots},
            {"dirs", std::move(dirs)}};
}

json series_json(const status_input& in) {
    json points = json::array();
    for (const auto& b : in.activity.series) {
        json routes = json::object();
        for (std::size_t g = 0; g < route_groups; ++g) {
            routes[std::string(name(static_cast<route_group>(g)))] = b.routes[g];
        }
        points.push_back(
            {{"t", b.start_ms},
             {"requests", b.requests},
             {"processed", b.processed},
             {"reused", b.reused},
             {"saved_seconds", b.saved_seconds},
             {"prefill_ms",
              b.timed ? json(b.prompt_ms_sum / static_cast<double>(b.timed)) : json(nullptr)},
             {"routes", std::move(routes)}});
    }
    return {{"bucket_seconds", activity::bucket_ms / 1000}, {"points", std::move(points)}};
}

json requests_json(const status_input& in) {
    json list = json::array();
    // Newest first: what the page shows at the top.
    for (auto it = in.activity.requests.rbegin(); it != in.activity.requests.rend(); ++it) {
        const auto& r = *it;
        list.push_back({{"at", r.at_ms},
                        {"id", r.id},
                        {"method", r.method},
                        {"path", r.path},
                        {"status", r.status},
                        {"backend", r.backend},
                        {"slot", r.slot ? json(*r.slot) : json(nullptr)},
                        {"route", r.route},
                        {"disk", r.disk},
                        {"rewrites", r.rewrites},
                        {"cached", opt(r.cached)},
                        {"processed", opt(r.processed)},
                        {"prefill_ms", r.prompt_ms},
                        {"ms", r.ms},
                        {"saved_seconds", r.saved_seconds},
                        {"error", r.error},
                        {"client_gone", r.client_gone}});
    }
    return list;
}

}  // namespace

std::string pass_through_reason(const config::config& cfg, const routing::backend_view& v,
                                const std::optional<routing::backend_info>& info) {
    if (!cfg.routing.enabled) {
        return "routing.enabled is false in the config: set it to true for cache-aware routing";
    }
    if (!info) return "not seen yet: warmslot has not read its GET /props";
    if (info->model_path.empty() && info->total_slots == 0)
        return "its router has not loaded this model yet: its slots are read once a request "
               "loads it";
    if (!v.pinning) {
        return "its idle slots are cleared into llama-server's RAM cache (started without -np): "
               "start it with an explicit -np N (e.g. -np 4), or --no-cache-idle-slots, or "
               "--cache-ram 0";
    }
    return "";
}

std::string body_preview(const json& body) {
    if (!body.is_object()) return "";
    if (body.contains("messages") && body["messages"].is_array()) {
        const auto& m = body["messages"];
        // The prefix a slot keeps is everything before the final turn; its longest message is
        // what a person recognises it by (the document, or the system prompt).
        const std::size_t n = m.size() > 1 ? m.size() - 1 : m.size();
        std::string best_joined, joined;
        std::string_view best;
        auto consider = [&](const json& content) {
            const auto t = text_of(content, joined);
            if (t.size() <= best.size()) return;
            if (t.data() == joined.data()) {  // keep a joined text alive past the next one
                best_joined.swap(joined);
                best = best_joined;
            } else {
                best = t;
            }
        };
        for (std::size_t i = 0; i < n; ++i) {
            if (m[i].is_object() && m[i].contains("content")) consider(m[i]["content"]);
        }
        if (body.contains("system")) consider(body["system"]);  // Anthropic-style top level
        return preview_text(best, preview_chars);
    }
    if (body.contains("prompt")) {
        const auto& p = body["prompt"];
        if (p.is_string()) return preview_text(p.get_ref<const std::string&>(), preview_chars);
        if (p.is_array() && !p.empty() && p[0].is_string())
            return preview_text(p[0].get_ref<const std::string&>(), preview_chars);
    }
    return "";
}

nlohmann::json build_status(const status_input& in) {
    const bool previews = in.cfg->dashboard.previews;
    json backends = json::array();
    for (std::size_t i = 0; i < in.cfg->backends.size() && i < in.views.size(); ++i) {
        if (in.cfg->backends[i].retired) continue;
        backends.push_back(backend_json(in, i, previews));
    }
    json by_route = json::object();
    for (int r = 0; r <= static_cast<int>(routing::route::pass_through); ++r) {
        by_route[std::string(routing::name(static_cast<routing::route>(r)))] =
            in.totals.requests_by_route[r];
    }
    return {{"version", in.version},
            {"now", in.now_ms},
            {"previews", previews},
            {"backends", std::move(backends)},
            {"disk", disk_json(in)},
            {"totals",
             {{"requests_by_route", std::move(by_route)},
              {"prompt_tokens_processed", in.totals.prompt_tokens_processed},
              {"prompt_tokens_reused", in.totals.prompt_tokens_reused},
              {"prefill_seconds_saved", in.totals.prefill_seconds_saved},
              {"mispredictions", in.totals.mispredictions},
              {"corrections", in.totals.corrections}}},
            {"series", series_json(in)},
            {"requests", requests_json(in)}};
}

}  // namespace warmslot::status
