// Files in directories other programs may write (cache.shared_dir above all, and slot
// directories): opened so that a name planted there cannot redirect or stall warmslot. A file is
// read only when the descriptor it opened is a regular file (a symbolic link at the last
// component is never followed, a FIFO never blocks the open), reads are bounded, and a file
// warmslot writes is always a new one (O_CREAT|O_EXCL|O_NOFOLLOW) under a random name.
//
// Blocking file I/O: call from a thread that may block, never from an I/O worker. Thread-safe.
// On Windows (no FIFOs, no O_NOFOLLOW) the same calls use the C++ streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace warmslot::cache {

// 16 hex digits from the system's random source: the unique part of a temporary name that
// another user of the directory cannot guess in advance.
std::string random_name_part();

// The whole content of `file` when it is a regular file (not a link, FIFO, device or
// directory) of at most `max_bytes`; std::nullopt otherwise or when it cannot be read.
std::optional<std::string> read_regular(const std::filesystem::path& file, std::size_t max_bytes);

// The first `n` bytes of regular file `file`, and its size; std::nullopt when it is not a
// regular file, is shorter, or cannot be read.
struct file_head {
    std::string bytes;
    std::uint64_t size = 0;
};
std::optional<file_head> read_head(const std::filesystem::path& file, std::size_t n);

// Creates `file`, which must not exist (a link of that name is not followed), and writes `text`.
// False when it exists, cannot be created or written (a partial file is removed).
bool write_new(const std::filesystem::path& file, std::string_view text);

// Copies regular file `from`, which must be exactly `bytes` long, into the new file `to`
// (created as write_new does), chunk by chunk until `deadline` (then `late` is set). False when
// anything fails; `to` is then left for the caller to remove.
bool copy_regular(const std::filesystem::path& from, const std::filesystem::path& to,
                  std::uint64_t bytes, std::chrono::steady_clock::time_point deadline, bool& late);

// Renames `from` to `to` only when no file of that name exists (Linux: renameat2 with
// RENAME_NOREPLACE; where the file system or platform lacks it, a check and a rename, which
// leave a short window). False, with `from` left in place, when `to` exists or anything fails.
bool rename_new(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace warmslot::cache
