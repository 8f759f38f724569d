// What llama-server says about itself (GET /props, /slots, /lora-adapters, /v1/models), read
// into the registry's types, and the backend identity that slot files are keyed by.
//
// Pure: no I/O, no throwing on bad input. A field of the wrong type makes the whole reading
// std::nullopt (the monitor logs it, marks the backend unknown and keeps polling); a field that
// is merely absent takes its default, as llama-server leaves out what it does not know.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "routing/registry.hpp"

namespace warmslot::routing {

// GET /props: total_slots, build_info, model_path, default_generation_settings.n_ctx,
// model_ftype, model_alias. std::nullopt: not an object, or a field of the wrong type.
struct props_reading {
    backend_info info;  // models and identity left empty
    std::string model_alias;
    bool sleeping = false;  // "is_sleeping": the model is unloaded (--sleep-idle-seconds)
};
std::optional<props_reading> read_props(const nlohmann::json& props);

// GET /slots: one entry per slot. std::nullopt: not an array, or an entry of the wrong shape.
std::optional<std::vector<observed_slot>> read_slots(const nlohmann::json& slots);

// llama-server numbers its tasks from 0 in each process, and a slot shows the id of the last
// task it ran: the highest id over the slots (-1: none ran one) never goes down while the
// process lives. A lower one than before, or none after some, is a new process (a restart),
// even when nothing else about the backend changed.
std::int64_t latest_task(const std::vector<observed_slot>& slots);
bool task_counter_went_back(std::int64_t before, std::int64_t now);

// GET /lora-adapters: the loaded adapters with their global scales, as one canonical string
// ("path@scale;..." in id order; "" without adapters). std::nullopt: an unexpected shape.
std::optional<std::string> read_lora(const nlohmann::json& adapters);

// GET /v1/models: the model ids, and the model's shape facts (`meta`: parameters, size,
// vocabulary, embedding width, training context) as one canonical string.
struct models_reading {
    std::vector<std::string> ids;
    std::string meta;
};
models_reading read_models(const nlohmann::json& models);

// The flags of a command backend's argv that change what the KV cache holds for the same tokens
// (RoPE and YaRN, --override-kv, adapters and control vectors, cache types, flash attention,
// SWA, unified KV), with their values, in order; "" for a url backend (llama-server does not
// show them).
std::string kv_flags(const std::vector<std::string>& argv);

// The environment forms of kv_flags' flags (LLAMA_ARG_ROPE_*, LLAMA_ARG_YARN_*, cache types,
// flash attention, SWA, unified KV) that are set, as "NAME=value" in a fixed order; "" when
// none is. llama-server reads them like the flags, and its loader never checks them against a
// slot file. `lookup` gives a variable's value as the process sees it (std::nullopt: unset).
std::string kv_env(const std::function<std::optional<std::string>(const std::string&)>& lookup);

// Whether a model of this architecture (`general.architecture` of its GGUF file) keeps a
// recurrent state (SSM, linear attention: the hybrid and recurrent families of llama.cpp's
// llm_arch_is_recurrent and llm_arch_is_hybrid) that llama-server can only roll back to one of
// its context checkpoints, never to an arbitrary token.
bool rolls_back_to_checkpoints_only(std::string_view architecture);

// The number of context checkpoints a command backend keeps per slot (`-ctxcp`,
// `--ctx-checkpoints`, `--swa-checkpoints`, with the value after it or after "="; else
// LLAMA_ARG_CTX_CHECKPOINTS from `lookup`); std::nullopt when not set (the server's default)
// or not a number.
std::optional<long> ctx_checkpoints_of(
    const std::vector<std::string>& argv,
    const std::function<std::optional<std::string>(const std::string&)>& lookup);

// The seconds of idleness after which a command backend's llama-server sleeps
// (`--sleep-idle-seconds N`, the last one given); std::nullopt when not set, -1 (off) or not a
// number.
std::optional<long> sleep_idle_of(const std::vector<std::string>& argv);

// Everything a slot file must match to load into this backend and mean the same thing: the
// model (its content identity `stamp` "gguf:..." when warmslot can read the file,
// cache/model_identity.hpp; else its path with the file's size@mtime `stamp`, or with "?" and
// the model's type and shape when the file is out of sight), build, slots, context per slot,
// adapters and their scales, KV-changing flags and environment.
std::string identity_of(const backend_info& info, const std::string& stamp,
                        const std::string& flags, const std::string& env = "");

}  // namespace warmslot::routing
