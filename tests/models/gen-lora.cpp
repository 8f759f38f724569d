// Writes a random LoRA adapter GGUF for a test model: low-rank A and B for every feed-forward
// matrix of the model's layers, sized from the model's own tensor table, so llama-server loads
// it with --lora and a request's "lora" scales change what the model computes.
//
//   gen-lora --model MODEL.gguf --seed N --out FILE
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace {

constexpr int64_t rank = 8;

bool adapted(const std::string& name) {
    const auto ends = [&](const std::string& s) {
        return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return name.rfind("blk.", 0) == 0 && (ends(".ffn_up.weight") || ends(".ffn_down.weight"));
}

int run(int argc, char** argv) {
    std::string model, out;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--model")
            model = v;
        else if (a == "--seed")
            seed = std::stoull(v);
        else if (a == "--out")
            out = v;
        else
            throw std::runtime_error("unknown option " + a);
    }
    if (model.empty() || out.empty())
        throw std::runtime_error("usage: gen-lora --model M --seed N --out FILE");
    ggml_context* meta = nullptr;
    gguf_init_params params{true, &meta};
    gguf_context* src = gguf_init_from_file(model.c_str(), params);
    if (!src) throw std::runtime_error("cannot read " + model);
    const int64_t arch_key = gguf_find_key(src, "general.architecture");
    if (arch_key < 0) throw std::runtime_error("no general.architecture in " + model);
    const std::string arch = gguf_get_val_str(src, arch_key);

    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> targets;
    size_t floats = 0;
    for (int64_t i = 0; i < gguf_get_n_tensors(src); ++i) {
        const std::string name = gguf_get_tensor_name(src, i);
        const ggml_tensor* t = ggml_get_tensor(meta, name.c_str());
        if (!adapted(name) || ggml_n_dims(t) != 2) continue;
        targets.push_back({name, {t->ne[0], t->ne[1]}});
        floats += static_cast<size_t>((t->ne[0] + t->ne[1]) * rank);
    }
    if (targets.empty()) throw std::runtime_error("no feed-forward matrices in " + model);
    ggml_init_params ip{floats * sizeof(float) + 2 * targets.size() * ggml_tensor_overhead() + 1024,
                        nullptr, false};
    ggml_context* data = ggml_init(ip);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    gguf_context* dst = gguf_init_empty();
    gguf_set_val_str(dst, "general.architecture", arch.c_str());
    gguf_set_val_str(dst, "general.type", "adapter");
    gguf_set_val_str(dst, "adapter.type", "lora");
    gguf_set_val_f32(dst, "adapter.lora.alpha", static_cast<float>(rank));
    for (const auto& [name, ne] : targets) {
        // llama-adapter.cpp: A is [n_in, r], B is [r, n_out] for a model matrix [n_in, n_out].
        ggml_tensor* a = ggml_new_tensor_2d(data, GGML_TYPE_F32, ne.first, rank);
        ggml_tensor* b = ggml_new_tensor_2d(data, GGML_TYPE_F32, rank, ne.second);
        ggml_set_name(a, (name + ".lora_a").c_str());
        ggml_set_name(b, (name + ".lora_b").c_str());
        for (ggml_tensor* t : {a, b}) {
            auto* f = static_cast<float*>(t->data);
            for (int64_t k = 0; k < ggml_nelements(t); ++k) f[k] = normal(rng);
            // The model keeps dimension 0 of its residual constant (gen-model.cpp steers its
            // output to ASCII with it): the adapter must not write to it either.
            if (t == b && name.size() >= 16 &&
                name.compare(name.size() - 16, 16, ".ffn_down.weight") == 0) {
                for (int64_t k = 0; k < rank; ++k) f[k] = 0.0f;
            }
            gguf_add_tensor(dst, t);
        }
    }
    const std::string tmp = out + ".tmp";
    const bool ok = gguf_write_to_file(dst, tmp.c_str(), false);
    gguf_free(dst);
    gguf_free(src);
    ggml_free(data);
    ggml_free(meta);
    if (!ok) throw std::runtime_error("cannot write " + tmp);
    if (std::rename(tmp.c_str(), out.c_str()) != 0)
        throw std::runtime_error("cannot rename to " + out);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gen-lora: %s\n", e.what());
        return 1;
    }
}
