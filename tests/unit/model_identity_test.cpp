// The model identity from a GGUF file's content: the same model at another path or time has the
// same identity, another model (metadata, tensor table or weights) another one.
#include "cache/model_identity.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace warmslot::cache;
namespace fs = std::filesystem;

namespace {

struct gguf_writer {
    std::vector<unsigned char> out;
    template <typename T>
    void put(T v) {
        unsigned char b[sizeof v];
        std::memcpy(b, &v, sizeof v);
        out.insert(out.end(), b, b + sizeof v);
    }
    void str(const std::string& s) {
        put<std::uint64_t>(s.size());
        out.insert(out.end(), s.begin(), s.end());
    }
};

// One f32 tensor of `n` values after a header with the architecture, an array and alignment.
std::vector<unsigned char> model(const std::string& arch, std::size_t n, float fill) {
    gguf_writer w;
    w.out = {'G', 'G', 'U', 'F'};
    w.put<std::uint32_t>(3);
    w.put<std::uint64_t>(1);  // tensors
    w.put<std::uint64_t>(3);  // key-value pairs
    w.str("general.architecture");
    w.put<std::uint32_t>(8);
    w.str(arch);
    w.str("tokenizer.ggml.tokens");
    w.put<std::uint32_t>(9);
    w.put<std::uint32_t>(8);
    w.put<std::uint64_t>(2);
    w.str("a");
    w.str("b");
    w.str("general.alignment");
    w.put<std::uint32_t>(4);
    w.put<std::uint32_t>(64);
    w.str("weights");
    w.put<std::uint32_t>(1);
    w.put<std::uint64_t>(n);
    w.put<std::uint32_t>(0);
    w.put<std::uint64_t>(0);
    while (w.out.size() % 64 != 0) w.out.push_back(0);
    for (std::size_t i = 0; i < n; ++i) w.put<float>(fill + static_cast<float>(i));
    return w.out;
}

fs::path write(const fs::path& p, const std::vector<unsigned char>& b) {
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
}

}  // namespace

TEST_CASE("model_content_id: the same content anywhere is the same model") {
    const fs::path dir =
        fs::temp_directory_path() / ("warmslot-model-id-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir / "other");
    const auto bytes = model("llama", 300000, 1.0f);  // 1.2 MB of data: sampled, not read whole
    const auto a = write(dir / "a.gguf", bytes);
    const auto id = model_content_id(a);
    REQUIRE(id);
    CHECK(id->starts_with("gguf:"));
    CHECK(id->size() == 5 + 32);

    // Copied to another path, with another modification time: the same identity.
    const auto b = dir / "other" / "renamed.gguf";
    fs::copy_file(a, b);
    fs::last_write_time(b, fs::last_write_time(a) - std::chrono::hours(48));
    CHECK(model_content_id(b) == id);

    // Another architecture string, another tensor size, other weights: other models.
    CHECK(model_content_id(write(dir / "arch.gguf", model("qwen35", 300000, 1.0f))) != id);
    CHECK(model_content_facts(dir / "arch.gguf")->architecture == "qwen35");
    CHECK_FALSE(model_content_facts(dir / "arch.gguf")->sliding_window);
    CHECK(model_content_id(write(dir / "size.gguf", model("llama", 300001, 1.0f))) != id);
    CHECK(model_content_id(write(dir / "weights.gguf", model("llama", 300000, 2.0f))) != id);
    auto last = bytes;  // the last data byte is always sampled
    last.back() ^= 0x01;
    CHECK(model_content_id(write(dir / "last.gguf", last)) != id);

    // Not GGUF, cut inside the tensor table, or missing: no content identity.
    auto not_gguf = bytes;
    not_gguf[0] = 'X';
    CHECK_FALSE(model_content_id(write(dir / "x.gguf", not_gguf)));
    CHECK_FALSE(model_content_id(
        write(dir / "cut.gguf", std::vector<unsigned char>(bytes.begin(), bytes.begin() + 150))));
    CHECK_FALSE(model_content_id(dir / "missing.gguf"));
    fs::remove_all(dir);
}

TEST_CASE("model_ids: computed once per path, size and time; read again when the file changes") {
    const fs::path dir = fs::temp_directory_path() /
                         ("warmslot-model-ids-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    const auto p = write(dir / "m.gguf", model("llama", 1000, 1.0f));
    const auto time = fs::last_write_time(p);
    model_ids ids;
    const auto first = ids.get(p);
    REQUIRE(first);
    // Other weights of the same size, and the old time put back: the remembered identity (the
    // file is not read again while path, size and time stay).
    write(p, model("llama", 1000, 5.0f));
    fs::last_write_time(p, time);
    CHECK(ids.get(p) == first);
    // A new time: read again.
    fs::last_write_time(p, time + std::chrono::seconds(10));
    const auto second = ids.get(p);
    REQUIRE(second);
    CHECK(second != first);
    CHECK(second->id == model_content_id(p));
    CHECK(second->architecture == "llama");
    fs::remove_all(dir);
}

TEST_CASE("model_content_facts: a sliding window in the metadata is read") {
    const fs::path dir = fs::temp_directory_path() /
                         ("warmslot-model-swa-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    gguf_writer w;
    w.out = {'G', 'G', 'U', 'F'};
    w.put<std::uint32_t>(3);
    w.put<std::uint64_t>(0);  // tensors
    w.put<std::uint64_t>(2);  // key-value pairs
    w.str("general.architecture");
    w.put<std::uint32_t>(8);
    w.str("gemma2");
    w.str("gemma2.attention.sliding_window");
    w.put<std::uint32_t>(4);
    w.put<std::uint32_t>(4096);
    while (w.out.size() % 32 != 0) w.out.push_back(0);  // no tensor data after the aligned end
    const auto facts = model_content_facts(write(dir / "swa.gguf", w.out));
    REQUIRE(facts);
    CHECK(facts->architecture == "gemma2");
    CHECK(facts->sliding_window);
    fs::remove_all(dir);
}
