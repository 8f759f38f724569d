// What llama-server says about itself (GET /props, /slots, /lora-adapters, /v1/models), read
// into the registry's types, and the backend identity that slot files are keyed by.
//
// Pure: no I/O, no throwing on bad input. A field of the wrong type makes the whole reading
// std::nullopt (the monitor logs it, marks the backend unknown and keeps polling); a field that
// is merely absent takes its default, as llama-server leaves out what it does not know.
#pragma once

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
};
std::optional<props_reading> read_props(const nlohmann::json& props);

// GET /slots: one entry per slot. std::nullopt: not an array, or an entry of the wrong shape.
std::optional<std::vector<observed_slot>> read_slots(const nlohmann::json& slots);

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

// Everything a slot file must match to load into this backend and mean the same thing: model
// file (path, and its size@mtime `stamp` when warmslot can see it), build, slots, context per
// slot, model type and shape, adapters and their scales, KV-changing flags.
std::string identity_of(const backend_info& info, const std::string& stamp,
                        const std::string& flags);

}  // namespace warmslot::routing
