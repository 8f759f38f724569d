#include "cache/slot_file.hpp"

#include <array>
#include <string_view>

#include "cache/safe_file.hpp"

namespace warmslot::cache {
namespace {

// llama.h: LLAMA_STATE_SEQ_MAGIC = LLAMA_FILE_MAGIC_GGSQ, written as a little-endian u32,
// then the format version and the token count (u32 each), then the tokens (4 bytes each).
constexpr std::uint32_t state_seq_magic = 0x67677371u;  // 'ggsq'
constexpr std::uint64_t header_bytes = 12;

std::uint32_t le32(const std::array<unsigned char, header_bytes>& b, std::size_t at) {
    return static_cast<std::uint32_t>(b[at]) | static_cast<std::uint32_t>(b[at + 1]) << 8 |
           static_cast<std::uint32_t>(b[at + 2]) << 16 |
           static_cast<std::uint32_t>(b[at + 3]) << 24;
}

}  // namespace

file_state check_slot_file(const std::filesystem::path& file, std::uint64_t saved_bytes) {
    // Judged on what the open descriptor is: a link or FIFO planted under the name is damaged.
    const auto read = read_head(file, header_bytes);
    if (!read || read->size != saved_bytes) return file_state::damaged;
    const std::uint64_t size = read->size;
    std::array<unsigned char, header_bytes> head{};
    for (std::size_t i = 0; i < header_bytes; ++i)
        head[i] = static_cast<unsigned char>(read->bytes[i]);
    if (le32(head, 0) != state_seq_magic) return file_state::damaged;
    const std::uint64_t tokens = le32(head, 8);
    return header_bytes + 4 * tokens <= size ? file_state::intact : file_state::damaged;
}

restore_failure judge_restore_failure(const slot_call_result& r, file_state f) {
    const auto plain = judge_restore_failure(r);
    if (plain == restore_failure::keep_file || f == file_state::damaged) return plain;
    // The other messages of a failed restore ("Restored prompt does not fit in the slot
    // context", "Invalid tokens in slot save file") are about the file whatever the cache holds.
    constexpr std::string_view ambiguous = "No available space in KV cache";
    return r.body.find(ambiguous) != std::string_view::npos ? restore_failure::keep_file : plain;
}

}  // namespace warmslot::cache
