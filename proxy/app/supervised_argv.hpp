// The command line and environment of a backend warmslot starts: the user's command plus the
// flags warmslot needs, and an environment cleaned of warmslot's own secrets. Pure; tested as
// tables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace warmslot::app {

// `b.command` plus --host b.host (a UNIX socket's path, which llama-server binds when it ends
// in ".sock"; else 127.0.0.1 with --port b.port), --slot-save-path b.slot_save_path (when set),
// --metrics and -np 4 unless the command already has them; with `isolated` (cache.isolation:
// tenant) also --cache-ram 0 unless it sets --cache-ram itself.
std::vector<std::string> supervised_argv(const config::backend& b, bool isolated = false);

// Whether a variable of warmslot's environment passes to a supervised llama-server: what a
// program needs to run (PATH, HOME, locale, time zone, temporary and library directories, the
// Windows system variables) and what configures the GPU runtimes and llama.cpp (CUDA_*, HIP_*,
// ROCR_*, HSA_*, GGML_*, LLAMA_*, ...). Anything else (API keys, tokens, cloud credentials)
// stays with warmslot. `windows`: names compare ignoring case, as Windows does.
bool passes_to_backend(std::string_view name, bool windows);

// The environment of `b`'s process, as NAME=value entries: the entries of `parent` (warmslot's,
// as NAME=value) that pass, then `b.env`, which wins over a passed variable of the same name.
// Entries without '=' or with an empty name (Windows' per-drive "=C:=C:\dir") are dropped.
// With a `key`, the process also gets it as LLAMA_API_KEY (llama-server's --api-key, not on
// the command line, which every local user can read), and no other value of it.
std::vector<std::string> supervised_env(const config::backend& b,
                                        const std::vector<std::string>& parent, bool windows,
                                        std::string_view key);

inline constexpr std::string_view child_key_variable = "LLAMA_API_KEY";

// A fresh key for a process warmslot starts: 256 random bits, as hex.
std::string random_child_key();

}  // namespace warmslot::app
