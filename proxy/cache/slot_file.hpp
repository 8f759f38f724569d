// What warmslot can see of a slot file itself, without llama-server. llama-server gives one
// answer, 400 "Unable to restore slot: No available space in KV cache or invalid slot save
// file", both when the file cannot be read (llama_state_seq_load_file catches every error and
// returns 0) and when its KV cache has no free cells for the file's tokens (a unified cache,
// `-kvu`, whose cells other slots hold): a failed restore is judged with the file in hand, so
// a good file is never dropped because the cache was merely full.
//
// Pure apart from check_slot_file, which reads a file (blocking: the cache thread).
#pragma once

#include <cstdint>
#include <filesystem>

#include "cache/disk_policy.hpp"

namespace warmslot::cache {

enum class file_state { intact, damaged };

// intact: the file exists, has the size its save wrote, begins with llama.cpp's sequence-state
// magic ("ggsq") and the token count after it fits in the file.
file_state check_slot_file(const std::filesystem::path& file, std::uint64_t saved_bytes);

// judge_restore_failure, told what the file looks like: llama-server's ambiguous answer drops
// only a damaged file; an intact one failed for want of free cells and is kept.
restore_failure judge_restore_failure(const slot_call_result& r, file_state f);

}  // namespace warmslot::cache
