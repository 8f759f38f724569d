// Slot files of another slot directory: two llama-server replicas of the same model and KV
// settings have the same backend identity, so the same keys; a prefix one of them saved into
// its own directory can be restored by the other once the file is in the other's directory
// (llama-server restores only from its own --slot-save-path).
//
// pick_replica_file and copy_allowed are pure. bring_slot_file reads and writes files
// (blocking: run it on a thread of its own, never on an I/O worker). No Asio here.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cache/index.hpp"

namespace warmslot::cache {

// One other directory's row for the wanted key, and the backend it is named after.
struct replica_offer {
    std::string backend;
    std::filesystem::path dir;
    snapshot row;
};

// The offer to take: the first whose row has `identity` (a key is a hash: the row says whose
// it really is), holds tokens, and is at most `max_bytes` (the receiving directory's budget,
// or its tenant's). std::nullopt: none fits.
std::optional<std::size_t> pick_replica_file(const std::vector<replica_offer>& offers,
                                             const std::string& identity, std::uint64_t max_bytes);

// Whether a copy of `bytes` may be made on a file system with `free_bytes` available (unknown:
// std::nullopt, allowed): it must leave a tenth of the file's size to spare, so that a copy
// never fills the disk llama-server saves to.
bool copy_allowed(std::uint64_t bytes, std::optional<std::uint64_t> free_bytes);

enum class bring_result {
    linked,    // a hard link to the source file (no bytes written)
    copied,    // a copy, within the deadline
    missing,   // the source is gone, of another size, or not a slot file: nothing to bring
    no_room,   // no link possible and no room for a copy
    too_slow,  // the copy did not finish before the deadline; nothing is left behind
    failed,    // the target directory cannot be written
};
inline constexpr std::size_t bring_results = 6;
const char* name(bring_result r) noexcept;  // also the label of warmslot_replica_files_total

struct bring_request {
    std::filesystem::path source;  // the other directory's file
    std::uint64_t bytes = 0;       // its size as its index says (what its save wrote)
    std::filesystem::path target;  // the file to make, in the receiving directory
    std::chrono::steady_clock::time_point deadline;
    bool allow_link = true;  // false: always copy
    // false: never over an existing file of the target's name (a caller that may give up
    // before the bring ends, and so lose its claim on the name meanwhile).
    bool replace = true;
    // Part of the temporary's name: unique per writer when several processes (on several
    // hosts) may write into the target directory at once (a shared directory).
    std::string tag;
};

// Makes `target` hold the source file: a hard link when the file system allows it, else a
// copy in chunks that gives up at the deadline. Written under a temporary "ws-*.bin.tmp" name
// in the target directory and renamed into place only when complete, so an index open() after
// a crash deletes what is left and a reader never sees half a file. The source is only read.
bring_result bring_slot_file(const bring_request& r);

}  // namespace warmslot::cache
