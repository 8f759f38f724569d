#include "cache/model_identity.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <string_view>
#include <vector>

namespace warmslot::cache {
namespace {

// Bounds against a file that is not what it says: more would not be a model llama.cpp loads.
constexpr std::uint64_t max_kv = 1u << 20;
constexpr std::uint64_t max_tensors = 1u << 22;
constexpr std::uint64_t max_string = 1u << 30;
constexpr int samples = 64;
constexpr std::size_t sample_bytes = 4096;

// Reads the file front to back, hashing every byte it reads.
class hashing_reader {
  public:
    hashing_reader(std::ifstream& in, XXH3_state_t* h) : in_(in), h_(h) {}
    bool bytes(void* out, std::size_t n) {
        if (!in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n))) return false;
        XXH3_128bits_update(h_, out, n);
        pos_ += n;
        return true;
    }
    template <typename T>
    bool value(T& v) {
        return bytes(&v, sizeof v);  // GGUF is little-endian, as every host llama.cpp runs on
    }
    bool skip(std::uint64_t n) {
        char buf[4096];
        while (n > 0) {
            const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof buf));
            if (!bytes(buf, k)) return false;
            n -= k;
        }
        return true;
    }
    bool string(std::string* out = nullptr) {
        std::uint64_t n = 0;
        if (!value(n) || n > max_string) return false;
        if (!out) return skip(n);
        out->resize(static_cast<std::size_t>(n));
        return bytes(out->data(), out->size());
    }
    std::uint64_t pos() const { return pos_; }

  private:
    std::ifstream& in_;
    XXH3_state_t* h_;
    std::uint64_t pos_ = 0;
};

// gguf.h: the sizes of the scalar types; 8 = string, 9 = array.
std::optional<std::uint64_t> scalar_size(std::uint32_t type) {
    constexpr std::uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type >= std::size(sizes) || sizes[type] == 0) return std::nullopt;
    return sizes[type];
}

bool skip_value(hashing_reader& r, std::uint32_t type, std::uint64_t file_size) {
    if (type == 8) return r.string();
    if (type != 9) {
        const auto size = scalar_size(type);
        return size && r.skip(*size);
    }
    std::uint32_t item = 0;
    std::uint64_t n = 0;
    if (!r.value(item) || !r.value(n) || n > file_size) return false;
    if (item == 8) {
        for (std::uint64_t i = 0; i < n; ++i) {
            if (!r.string()) return false;
        }
        return true;
    }
    const auto size = scalar_size(item);
    return size && n <= file_size / *size && r.skip(n * *size);
}

// Reads header, metadata and tensor table; returns where the tensor data begins, and the
// architecture and sliding window in `facts`.
std::optional<std::uint64_t> read_front(hashing_reader& r, std::uint64_t file_size,
                                        model_facts& facts) {
    char magic[4];
    std::uint32_t version = 0;
    std::uint64_t n_tensors = 0, n_kv = 0;
    if (!r.bytes(magic, 4) || std::string_view(magic, 4) != "GGUF" || !r.value(version) ||
        version < 2 || !r.value(n_tensors) || !r.value(n_kv) || n_kv > max_kv ||
        n_tensors > max_tensors) {
        return std::nullopt;
    }
    std::uint64_t alignment = 32;
    for (std::uint64_t i = 0; i < n_kv; ++i) {
        std::string key;
        std::uint32_t type = 0;
        if (!r.string(&key) || !r.value(type)) return std::nullopt;
        if (key == "general.alignment" && type == 4) {  // uint32
            std::uint32_t a = 0;
            if (!r.value(a) || a == 0 || (a & (a - 1)) != 0) return std::nullopt;
            alignment = a;
        } else if (key == "general.architecture" && type == 8) {
            if (!r.string(&facts.architecture)) return std::nullopt;
        } else if (key.ends_with(".attention.sliding_window") && type == 4) {  // uint32
            std::uint32_t window = 0;
            if (!r.value(window)) return std::nullopt;
            facts.sliding_window = window > 0;
        } else if (!skip_value(r, type, file_size)) {
            return std::nullopt;
        }
    }
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        std::uint32_t dims = 0, type = 0;
        std::uint64_t offset = 0;
        if (!r.string() || !r.value(dims) || dims > 8 || !r.skip(8ull * dims) || !r.value(type) ||
            !r.value(offset)) {
            return std::nullopt;
        }
    }
    const auto start = (r.pos() + alignment - 1) / alignment * alignment;
    if (start > file_size) return std::nullopt;
    return start;
}

}  // namespace

std::optional<model_facts> model_content_facts(const std::filesystem::path& file) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;
    const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(),
                                                                     &XXH3_freeState);
    if (!h || XXH3_128bits_reset(h.get()) != XXH_OK) return std::nullopt;
    hashing_reader r(in, h.get());
    model_facts out;
    const auto data = read_front(r, size, out);
    if (!data) return std::nullopt;
    const std::uint64_t data_size = size - *data;
    XXH3_128bits_update(h.get(), &data_size, sizeof data_size);
    std::vector<char> block(sample_bytes);
    for (int i = 0; i < samples && data_size > 0; ++i) {
        const std::uint64_t span = data_size > sample_bytes ? data_size - sample_bytes : 0;
        const std::uint64_t at = *data + span * static_cast<std::uint64_t>(i) / (samples - 1);
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(sample_bytes, size - at));
        in.clear();
        in.seekg(static_cast<std::streamoff>(at));
        if (!in.read(block.data(), static_cast<std::streamsize>(n))) return std::nullopt;
        XXH3_128bits_update(h.get(), block.data(), n);
    }
    const auto d = XXH3_128bits_digest(h.get());
    out.id = fmt::format("gguf:{:016x}{:016x}", d.high64, d.low64);
    return out;
}

std::optional<std::string> model_content_id(const std::filesystem::path& file) {
    auto facts = model_content_facts(file);
    if (!facts) return std::nullopt;
    return std::move(facts->id);
}

std::optional<model_facts> model_ids::get(const std::filesystem::path& file) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec) return std::nullopt;
    const auto time = std::filesystem::last_write_time(file, ec);
    if (ec) return std::nullopt;
    const std::string key = file.string();
    {
        std::lock_guard lock(mu_);
        const auto it = known_.find(key);
        if (it != known_.end() && it->second.size == size && it->second.time == time) {
            return it->second.facts;
        }
    }
    auto facts = model_content_facts(file);  // outside the lock: may read for a while
    std::lock_guard lock(mu_);
    if (known_.size() >= max_entries && !known_.count(key)) known_.erase(known_.begin());
    known_[key] = entry{size, time, facts};
    return facts;
}

}  // namespace warmslot::cache
