// The identity of a model file from its content, so that the same model has the same slot-file
// keys wherever it lies: on two hosts, for two replicas, after a copy to another path or time.
//
// A GGUF file is a header (magic, version, counts), its metadata (key-value pairs: the
// architecture, hyperparameters, tokenizer, chat template) and its tensor table (names, shapes,
// types, offsets), then the tensor data. The identity hashes the header, metadata and tensor
// table whole, and the tensor data by samples (64 blocks of 4 KiB spread evenly, the first and
// the last included): a different model differs in its metadata or table, or in its weights
// almost everywhere (another fine-tune, another quantization), while reading a few hundred KiB
// instead of gigabytes. Two files that differ only in bytes no sample touches get the same
// identity: a deliberate edit of a weight is not a model warmslot can tell apart.
//
// Reads files: blocking, never on an I/O thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace warmslot::cache {

// What warmslot reads of a model file: its identity and its architecture.
struct model_facts {
    std::string id;               // "gguf:" and 32 hex digits (XXH3-128)
    std::string architecture;     // general.architecture ("llama", "qwen35", ...), "" when absent
    bool sliding_window = false;  // <arch>.attention.sliding_window set above 0 (gemma-2/3 style)

    bool operator==(const model_facts&) const = default;
};

// std::nullopt when the file cannot be read or is not GGUF as this reader knows it (then the
// caller keys by path and what the server says).
std::optional<model_facts> model_content_facts(const std::filesystem::path& file);
std::optional<std::string> model_content_id(const std::filesystem::path& file);

// model_content_facts computed at most once per file, remembered by its path, size and modification
// time (a file changed in place is read again). Thread-safe; bounded (a few entries per model
// file ever loaded: the oldest are forgotten past max_entries).
class model_ids {
  public:
    std::optional<model_facts> get(const std::filesystem::path& file);

  private:
    static constexpr std::size_t max_entries = 256;
    struct entry {
        std::uintmax_t size = 0;
        std::filesystem::file_time_type time;
        std::optional<model_facts> facts;
    };
    std::mutex mu_;
    std::map<std::string, entry> known_;
};

}  // namespace warmslot::cache
