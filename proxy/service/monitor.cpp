#include "service/monitor.hpp"

#include "util/log.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "upstream/llama_client.hpp"

namespace warmslot::service {
namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds call_timeout{5000};

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("routing");
    return logger;
}

json parse(const upstream::reply& r) {
    if (r.ec || r.status != 200) return json();
    return json::parse(r.body, nullptr, false);
}

std::string base_name(const std::string& path) {
    auto name = path.substr(path.find_last_of("/\\") + 1);
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    return name;
}

// Size and modification time of the model file when warmslot can see it (same host), so a
// model replaced under the same name gets new snapshot keys.
std::string model_file_stamp(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return "?";
    const auto time = std::filesystem::last_write_time(path, ec);
    if (ec) return std::to_string(size);
    return std::to_string(size) + "@" + std::to_string(time.time_since_epoch().count());
}

}  // namespace

monitor::monitor(const config::source& src, routing::registry& reg, net::any_io_executor ex)
    : src_(src), reg_(reg), ex_(ex), pool_(ex, 4) {}

void monitor::start() {
    net::post(ex_, [this] { start_watches(); });
}

void monitor::start_watches() {
    const auto cfg = src_.current();
    const auto n = cfg->backends.size();
    if (identity_.size() < n) identity_.resize(n);
    if (warned_.size() < n) warned_.resize(n, false);
    if (watching_.size() < n) watching_.resize(n, false);
    for (std::size_t i = 0; i < n; ++i) {
        if (cfg->backends[i].retired || watching_[i]) continue;
        watching_[i] = true;
        identity_[i].clear();  // a returning backend is read afresh
        net::co_spawn(ex_, watch(i), net::detached);
    }
}

void monitor::stop() { stopping_ = true; }

awaitable<void> monitor::watch(std::size_t backend) {
    net::steady_timer timer(ex_);
    while (!stopping_) {
        const auto cfg = src_.current();
        if (cfg->backends[backend].retired) break;
        co_await refresh(backend);
        timer.expires_after(cfg->routing.reconcile_interval);
        co_await timer.async_wait(nothrow);
    }
    watching_[backend] = false;
}

// Reads /props (and /v1/models when the backend is new or restarted), then /slots.
awaitable<bool> monitor::refresh(std::size_t i) {
    const auto cfg = src_.current();
    const auto& b = cfg->backends[i];
    const int idx = static_cast<int>(i);
    const json props = parse(co_await upstream::call(pool_, b, http::verb::get, "/props", "", call_timeout));
    if (!props.is_object()) {
        reg_.set_healthy(idx, false);
        co_return false;
    }
    routing::backend_info info;
    info.total_slots = props.value("total_slots", 0);
    info.build_info = props.value("build_info", "");
    info.model_path = props.value("model_path", "");
    if (auto g = props.find("default_generation_settings"); g != props.end() && g->is_object()) {
        info.n_ctx_per_slot = g->value("n_ctx", std::uint64_t{0});
    }
    const std::string identity = info.model_path + "|" + info.build_info + "|" +
                                 std::to_string(info.total_slots) + "|" +
                                 std::to_string(info.n_ctx_per_slot);
    info.identity = identity + "|" + model_file_stamp(info.model_path);
    if (identity != identity_[i]) {
        const json models = parse(co_await upstream::call(pool_, b, http::verb::get, "/v1/models", "", call_timeout));
        info.models = b.models;
        if (models.is_object() && models.contains("data") && models["data"].is_array()) {
            for (const auto& m : models["data"]) {
                if (m.is_object() && m.contains("id") && m["id"].is_string()) {
                    info.models.push_back(m["id"].get<std::string>());
                }
            }
        }
        if (const auto alias = props.value("model_alias", ""); !alias.empty()) info.models.push_back(alias);
        if (!info.model_path.empty()) info.models.push_back(base_name(info.model_path));
        bool pinning = false;
        if (cfg->routing.enabled) pinning = co_await probe_stable_slots(b, i, info.total_slots);
        if (!identity_[i].empty()) {
            log()->warn("backend {} restarted or changed ({}): its slots are assumed empty", b.name,
                        info.model_path);
            reg_.forget_all(idx);
        }
        reg_.set_info(idx, info, pinning);
        identity_[i] = identity;
        log()->info("backend {}: {} slots of {} tokens, model {}, {}", b.name, info.total_slots,
                    info.n_ctx_per_slot, info.model_path,
                    pinning ? "cache-aware routing on" : "passed through without routing");
    }
    reg_.set_healthy(idx, true);
    if (auto slots = co_await read_slots(b)) reg_.reconcile(idx, *slots, routing::clock::now());
    co_return true;
}

awaitable<std::optional<std::vector<routing::observed_slot>>> monitor::read_slots(config::backend b) {
    const json slots = parse(co_await upstream::call(pool_, b, http::verb::get, "/slots", "", call_timeout));
    if (!slots.is_array()) co_return std::nullopt;
    std::vector<routing::observed_slot> out;
    for (const auto& s : slots) {
        if (!s.is_object()) continue;
        routing::observed_slot o;
        o.id = s.value("id", -1);
        o.processing = s.value("is_processing", false);
        if (s.contains("n_prompt_tokens") && s["n_prompt_tokens"].is_number_integer()) {
            o.n_prompt_tokens = s["n_prompt_tokens"].get<std::uint64_t>();
        }
        out.push_back(o);
    }
    co_return out;
}

// llama-server with its defaults (no -np: unified KV and --cache-idle-slots) moves every idle
// slot into its RAM cache and clears it when a new task starts, so a pinned slot would be empty
// and pinning a slot being swapped can hang the server. Two idle slots are given a tiny prompt
// each, pinned; if the first is empty after the second ran, slot contents are not stable.
awaitable<bool> monitor::probe_stable_slots(config::backend b, std::size_t i, int total_slots) {
    if (total_slots < 2) co_return true;
    auto before = co_await read_slots(b);
    if (!before || before->size() < 2 || (*before)[0].processing || (*before)[1].processing) {
        co_return false;  // cannot tell safely now; the next restart check probes again
    }
    for (int slot : {0, 1}) {
        json body = {{"prompt", "warmslot slot probe " + std::to_string(slot)},
                     {"n_predict", 1}, {"id_slot", slot}, {"cache_prompt", true},
                     {"temperature", 0}};
        // Only the transport matters: the server may reject the one sampled token (a chat
        // parser refusing random output answers 500) after the prompt is in the slot.
        auto r = co_await upstream::call(pool_, b, http::verb::post, "/completion", body.dump(), call_timeout);
        if (r.ec) co_return false;
    }
    auto after = co_await read_slots(b);
    const bool stable = after && after->size() >= 2 && (*after)[0].n_prompt_tokens.value_or(0) > 0;
    for (int slot : {0, 1}) {  // leave no trace: the probe's prompts are worth nothing
        const std::string target = "/slots/" + std::to_string(slot) + "?action=erase";
        co_await upstream::call(pool_, b, http::verb::post, target, "{}", call_timeout);
    }
    if (!stable && !warned_[i]) {
        warned_[i] = true;
        log()->warn("backend {} clears idle slots into its RAM cache (llama-server started without "
                    "-np): warmslot passes its requests through unrouted, so it does no worse than "
                    "llama-server alone. For cache-aware routing start it with an explicit -np N "
                    "(e.g. -np 4), or --no-cache-idle-slots, or --cache-ram 0.", b.name);
    }
    co_return stable;
}

}  // namespace warmslot::service
