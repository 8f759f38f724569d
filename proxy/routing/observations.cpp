#include "routing/observations.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string_view>

namespace warmslot::routing {
namespace {

using nlohmann::json;

// The value of `key` in `o` when it has type T; `fallback` when absent or null; nullopt when
// present with another type.
template <typename T>
std::optional<T> field(const json& o, const char* key, T fallback) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) return fallback;
    if constexpr (std::is_same_v<T, std::string>) {
        if (!it->is_string()) return std::nullopt;
    } else if constexpr (std::is_same_v<T, bool>) {
        if (!it->is_boolean()) return std::nullopt;
    } else if constexpr (std::is_signed_v<T>) {
        if (!it->is_number_integer()) return std::nullopt;
    } else {
        if (!it->is_number_unsigned()) return std::nullopt;
    }
    return it->get<T>();
}

}  // namespace

std::optional<props_reading> read_props(const json& props) {
    if (!props.is_object()) return std::nullopt;
    props_reading r;
    auto& info = r.info;
    const auto slots = field<std::int64_t>(props, "total_slots", 0);
    const auto build = field<std::string>(props, "build_info", "");
    const auto path = field<std::string>(props, "model_path", "");
    const auto alias = field<std::string>(props, "model_alias", "");
    if (!slots || *slots < 0 || *slots > 4096 || !build || !path || !alias) return std::nullopt;
    info.total_slots = static_cast<int>(*slots);
    info.build_info = *build;
    info.model_path = *path;
    r.model_alias = *alias;
    if (const auto z = props.find("is_sleeping"); z != props.end() && !z->is_null()) {
        if (!z->is_boolean()) return std::nullopt;
        r.sleeping = z->get<bool>();
    }
    if (const auto f = props.find("model_ftype"); f != props.end() && !f->is_null()) {
        if (!f->is_string() && !f->is_number()) return std::nullopt;
        info.model_type = f->dump();
    }
    if (const auto g = props.find("default_generation_settings");
        g != props.end() && !g->is_null()) {
        if (!g->is_object()) return std::nullopt;
        const auto n_ctx = field<std::uint64_t>(*g, "n_ctx", 0);
        if (!n_ctx) return std::nullopt;
        info.n_ctx_per_slot = *n_ctx;
    }
    return r;
}

std::optional<std::vector<observed_slot>> read_slots(const json& slots) {
    if (!slots.is_array()) return std::nullopt;
    std::vector<observed_slot> out;
    for (const auto& s : slots) {
        if (!s.is_object()) return std::nullopt;
        const auto id = field<std::int64_t>(s, "id", -1);
        const auto processing = field<bool>(s, "is_processing", false);
        const auto tokens = field<std::int64_t>(s, "n_prompt_tokens", -1);
        const auto task = field<std::int64_t>(s, "id_task", -1);
        if (!id || !processing || !tokens || !task || *id < 0 || *id > 4096) return std::nullopt;
        observed_slot o;
        o.id = static_cast<int>(*id);
        o.processing = *processing;
        if (*tokens >= 0) o.n_prompt_tokens = static_cast<std::uint64_t>(*tokens);
        if (*task >= 0) o.task = *task;
        out.push_back(o);
    }
    return out;
}

std::int64_t latest_task(const std::vector<observed_slot>& slots) {
    std::int64_t latest = -1;
    for (const auto& s : slots) latest = std::max(latest, s.task.value_or(-1));
    return latest;
}

bool task_counter_went_back(std::int64_t before, std::int64_t now) {
    return before >= 0 && now < before;
}

std::optional<std::string> read_lora(const json& adapters) {
    if (!adapters.is_array()) return std::nullopt;
    std::vector<std::pair<std::int64_t, std::string>> items;
    for (const auto& a : adapters) {
        if (!a.is_object()) return std::nullopt;
        const auto id = field<std::int64_t>(a, "id", -1);
        const auto path = field<std::string>(a, "path", "");
        const auto scale = a.find("scale");
        if (!id || !path || (scale != a.end() && !scale->is_number())) return std::nullopt;
        const std::string s = scale == a.end() ? "1" : scale->dump();
        items.emplace_back(*id, *path + "@" + s);
    }
    std::sort(items.begin(), items.end());
    std::string out;
    for (const auto& [id, text] : items) out += (out.empty() ? "" : ";") + text;
    return out;
}

models_reading read_models(const json& models) {
    models_reading r;
    if (!models.is_object()) return r;
    const auto data = models.find("data");
    if (data == models.end() || !data->is_array()) return r;
    for (const auto& m : *data) {
        if (!m.is_object()) continue;
        if (const auto id = m.find("id"); id != m.end() && id->is_string()) {
            r.ids.push_back(id->get<std::string>());
        }
        const auto meta = m.find("meta");
        if (meta == m.end() || !meta->is_object() || !r.meta.empty()) continue;
        for (const char* key :
             {"n_params", "size", "n_vocab", "n_embd", "n_ctx_train", "vocab_type"}) {
            if (const auto v = meta->find(key);
                v != meta->end() && (v->is_number() || v->is_string())) {
                r.meta += std::string(r.meta.empty() ? "" : ",") + key + "=" + v->dump();
            }
        }
    }
    return r;
}

std::string kv_flags(const std::vector<std::string>& argv) {
    // Flags and how many values follow them (a flag given as --flag=value carries its own).
    struct flag {
        std::string_view name;
        int values;
    };
    constexpr std::array<flag, 26> flags{{{"--rope-scaling", 1},
                                          {"--rope-scale", 1},
                                          {"--rope-freq-base", 1},
                                          {"--rope-freq-scale", 1},
                                          {"--yarn-orig-ctx", 1},
                                          {"--yarn-ext-factor", 1},
                                          {"--yarn-attn-factor", 1},
                                          {"--yarn-beta-slow", 1},
                                          {"--yarn-beta-fast", 1},
                                          {"--override-kv", 1},
                                          {"--lora", 1},
                                          {"--lora-scaled", 2},
                                          {"--control-vector", 1},
                                          {"--control-vector-scaled", 2},
                                          {"--control-vector-layer-range", 2},
                                          {"-ctk", 1},
                                          {"--cache-type-k", 1},
                                          {"-ctv", 1},
                                          {"--cache-type-v", 1},
                                          {"--flash-attn", 1},
                                          {"-fa", 0},
                                          {"--swa-full", 0},
                                          {"-kvu", 0},
                                          {"--kv-unified", 0},
                                          {"--no-kv-unified", 0},
                                          {"--lora-init-without-apply", 0}}};
    std::string out;
    const auto add = [&](std::string_view s) { (out += out.empty() ? "" : " ") += s; };
    for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string_view a = argv[i];
        const std::string_view name = a.substr(0, a.find('='));
        const auto f =
            std::find_if(flags.begin(), flags.end(), [&](const flag& x) { return x.name == name; });
        if (f == flags.end()) continue;
        add(a);
        if (name.size() != a.size()) continue;  // --flag=value
        // "-fa" may also be followed by on/off/auto in newer builds.
        const int values = f->name == "-fa" ? 1 : f->values;
        for (int v = 0; v < values && i + 1 < argv.size() && !argv[i + 1].starts_with("-"); ++v) {
            add(argv[++i]);
        }
    }
    return out;
}

std::string kv_env(const std::function<std::optional<std::string>(const std::string&)>& lookup) {
    // common/arg.cpp of the pinned llama.cpp: set_env() of the flags kv_flags lists (adapters,
    // control vectors and --override-kv have no environment form).
    constexpr std::array<std::string_view, 15> names{
        "LLAMA_ARG_ROPE_SCALING_TYPE", "LLAMA_ARG_ROPE_SCALE",     "LLAMA_ARG_ROPE_FREQ_BASE",
        "LLAMA_ARG_ROPE_FREQ_SCALE",   "LLAMA_ARG_YARN_ORIG_CTX",  "LLAMA_ARG_YARN_EXT_FACTOR",
        "LLAMA_ARG_YARN_ATTN_FACTOR",  "LLAMA_ARG_YARN_BETA_SLOW", "LLAMA_ARG_YARN_BETA_FAST",
        "LLAMA_ARG_CACHE_TYPE_K",      "LLAMA_ARG_CACHE_TYPE_V",   "LLAMA_ARG_FLASH_ATTN",
        "LLAMA_ARG_SWA_FULL",          "LLAMA_ARG_KV_UNIFIED",     "LLAMA_ARG_KV_UNIFIED_PER_SLOT"};
    std::string out;
    for (const auto name : names) {
        const auto value = lookup(std::string(name));
        if (!value) continue;
        (out += out.empty() ? "" : " ").append(name).append("=").append(*value);
    }
    return out;
}

bool rolls_back_to_checkpoints_only(std::string_view architecture) {
    // src/llama-arch.cpp of the pinned llama.cpp: llm_arch_is_recurrent and llm_arch_is_hybrid.
    constexpr std::array<std::string_view, 23> recurrent{
        "arwkv7",     "bailingmoe3", "deepseek4",      "falcon-h1",  "granitehybrid", "jamba",
        "kimi-k3",    "kimi-linear", "lfm2",           "lfm2moe",    "mamba",         "mamba2",
        "minimax-01", "nemotron_h",  "nemotron_h_moe", "plamo2",     "qwen35",        "qwen35moe",
        "qwen3next",  "qwen4exp",    "rwkv6",          "rwkv6qwen2", "rwkv7"};
    return std::find(recurrent.begin(), recurrent.end(), architecture) != recurrent.end();
}

namespace {

std::optional<long> whole_number(std::string_view text) {
    long v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
    return v;
}

// The value of the last of `names` in argv (after it, or after "="), as llama-server takes it.
std::optional<std::string> flag_value(const std::vector<std::string>& argv,
                                      std::initializer_list<std::string_view> names) {
    std::optional<std::string> value;
    for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string_view a = argv[i];
        const std::string_view name = a.substr(0, a.find('='));
        if (std::find(names.begin(), names.end(), name) == names.end()) continue;
        if (name.size() != a.size())
            value = std::string(a.substr(name.size() + 1));
        else if (i + 1 < argv.size())
            value = argv[++i];
    }
    return value;
}

}  // namespace

std::optional<long> ctx_checkpoints_of(
    const std::vector<std::string>& argv,
    const std::function<std::optional<std::string>(const std::string&)>& lookup) {
    const auto value = flag_value(argv, {"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"});
    if (value) return whole_number(*value);
    if (const auto env = lookup("LLAMA_ARG_CTX_CHECKPOINTS")) return whole_number(*env);
    return std::nullopt;
}

std::optional<long> sleep_idle_of(const std::vector<std::string>& argv) {
    const auto value = flag_value(argv, {"--sleep-idle-seconds"});
    if (!value) return std::nullopt;
    const auto n = whole_number(*value);
    if (!n || *n == 0) return std::nullopt;
    return n;
}

std::string identity_of(const backend_info& info, const std::string& stamp,
                        const std::string& flags, const std::string& env) {
    const std::string layout = info.build_info + "|" + std::to_string(info.total_slots) + "|" +
                               std::to_string(info.n_ctx_per_slot);
    // The model's content identity stands for the model wherever its file lies (identity format
    // 2): two hosts or replicas with the same model and settings have the same keys.
    std::string id = stamp.starts_with("gguf:") ? "2|" + stamp + "|" + layout
                                                : info.model_path + "|" + layout + "|" + stamp;
    // Fields added later go after the original ones only when present, so a backend without
    // adapters, flags or a model type keeps the keys (and files) it had.
    // Without the file's stamp (llama-server on another host), the model's type and shape tell
    // a model replaced at the same path.
    if (stamp == "?" && !info.model_type.empty()) id += "|type=" + info.model_type;
    if (stamp == "?" && !info.model_meta.empty()) id += "|meta=" + info.model_meta;
    if (!info.lora.empty()) id += "|lora=" + info.lora;
    if (!flags.empty()) id += "|flags=" + flags;
    if (!env.empty()) id += "|env=" + env;
    return id;
}

}  // namespace warmslot::routing
