// Writes a random-weight GGUF model for tests and benchmarks.
//
//   gen-model --arch llama|qwen35|gemma2 --preset tiny|bench --seed N --out FILE
//
// The weights are random (seeded, deterministic); the tokenizer is real: a byte-level BPE
// vocabulary (one token per UTF-8 byte, so any text round-trips exactly) plus the ChatML
// control tokens, and a ChatML chat template. llama.cpp itself creates the tensors from the
// metadata (llama_model_init_from_user), so the shapes always match the linked llama.cpp.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

namespace {

struct shape {
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff;
    uint32_t ssm_state, ssm_groups, ssm_v_heads; // hybrid (qwen35) only
};

constexpr uint32_t context_length = 131072;

shape preset_shape(const std::string& preset) {
    if (preset == "tiny") return {128, 2, 2, 2, 256, 64, 1, 2};
    if (preset == "bench") return {1024, 8, 8, 8, 2816, 128, 2, 4};
    throw std::runtime_error("unknown preset: " + preset + " (tiny or bench)");
}

// GPT-2's reversible byte -> printable code point mapping, UTF-8 encoded.
std::string byte_token_text(unsigned b) {
    unsigned cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        unsigned n = 0;
        for (unsigned c = 0; c < b; ++c) {
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) ++n;
        }
        cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

const char* chat_template =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

void add_tokenizer(gguf_context* g) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (unsigned b = 0; b < 256; ++b) {
        tokens.push_back(byte_token_text(b));
        types.push_back(1);  // normal
    }
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.emplace_back(special);
        types.push_back(3);  // control
    }
    std::vector<const char*> ptrs;
    for (auto& t : tokens) ptrs.push_back(t.c_str());
    std::vector<float> scores(tokens.size(), 0.0f);
    gguf_set_val_str(g, "tokenizer.ggml.model", "gpt2");
    gguf_set_val_str(g, "tokenizer.ggml.pre", "default");
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), types.size());
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), scores.size());
    const char* no_merges[1] = {nullptr};
    gguf_set_arr_str(g, "tokenizer.ggml.merges", no_merges, 0);
    gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", 256);
    gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", 258);
    gguf_set_val_u32(g, "tokenizer.ggml.padding_token_id", 256);
    gguf_set_val_bool(g, "tokenizer.ggml.add_bos_token", false);
}

void add_hparams(gguf_context* g, const std::string& arch, const shape& s) {
    auto key = [&](const char* k) { return arch + "." + k; };
    gguf_set_val_str(g, "general.architecture", arch.c_str());
    gguf_set_val_str(g, "general.name", ("warmslot-test-" + arch).c_str());
    gguf_set_val_u32(g, key("context_length").c_str(), context_length);
    gguf_set_val_u32(g, key("embedding_length").c_str(), s.n_embd);
    gguf_set_val_u32(g, key("block_count").c_str(), s.n_layer);
    gguf_set_val_u32(g, key("feed_forward_length").c_str(), s.n_ff);
    gguf_set_val_u32(g, key("attention.head_count").c_str(), s.n_head);
    gguf_set_val_u32(g, key("attention.head_count_kv").c_str(), s.n_head_kv);
    gguf_set_val_f32(g, key("attention.layer_norm_rms_epsilon").c_str(), 1e-6f);
    gguf_set_val_f32(g, key("rope.freq_base").c_str(), 1000000.0f);
    const uint32_t head_dim = s.n_embd / s.n_head;
    if (arch == "qwen35") {
        const uint32_t q = head_dim / 4;
        const uint32_t sections[4] = {q, q, q, q};
        gguf_set_arr_data(g, key("rope.dimension_sections").c_str(), GGUF_TYPE_UINT32, sections, 4);
        gguf_set_val_u32(g, key("ssm.conv_kernel").c_str(), 4);
        gguf_set_val_u32(g, key("ssm.state_size").c_str(), s.ssm_state);
        gguf_set_val_u32(g, key("ssm.group_count").c_str(), s.ssm_groups);
        gguf_set_val_u32(g, key("ssm.time_step_rank").c_str(), s.ssm_v_heads);
        gguf_set_val_u32(g, key("ssm.inner_size").c_str(), s.ssm_state * s.ssm_v_heads);
        gguf_set_val_u32(g, key("full_attention_interval").c_str(), 2);
    } else if (arch == "gemma2") {
        gguf_set_val_u32(g, key("attention.sliding_window").c_str(), 512);
        gguf_set_val_f32(g, key("attn_logit_softcapping").c_str(), 50.0f);
        gguf_set_val_f32(g, key("final_logit_softcapping").c_str(), 30.0f);
        gguf_set_val_u32(g, key("attention.key_length").c_str(), head_dim);
        gguf_set_val_u32(g, key("attention.value_length").c_str(), head_dim);
    } else if (arch != "llama") {
        throw std::runtime_error("unknown arch: " + arch + " (llama, qwen35 or gemma2)");
    }
}

// Random weights emit random bytes, and a reply cut inside a UTF-8 sequence makes the server's
// chat parser fail. Dimension 0 of every token embedding is made large and positive, and the
// output layer reads it with +1 for printable ASCII and -1 for every other token, so greedy
// decoding writes plain ASCII text and never ends early on a control token.
void steer_to_ascii(const std::string& name, size_t n_embd, std::vector<float>& v) {
    const size_t rows = v.size() / n_embd;
    if (name == "token_embd.weight") {
        for (size_t r = 0; r < rows; ++r) v[r * n_embd] = 1.0f;
    } else if (name == "output.weight") {
        for (size_t r = 0; r < rows; ++r) {
            const bool printable = (r >= 32 && r < 127) || r == '\n';
            v[r * n_embd] = printable ? 1.0f : -1.0f;
        }
    } else if (name == "output_norm.weight") {
        v[0] = 1.0f;
    }
}

void set_random(ggml_tensor* t, void* userdata) {
    const uint64_t seed = *static_cast<const uint64_t*>(userdata);
    // Seed per tensor from its name so the result does not depend on creation order.
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char* p = t->name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
    std::mt19937_64 gen(h);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    const auto n = static_cast<size_t>(ggml_nelements(t));
    if (t->type == GGML_TYPE_F32) {
        std::vector<float> v(n);
        for (auto& x : v) x = dist(gen);
        steer_to_ascii(t->name, static_cast<size_t>(t->ne[0]), v);
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> v(n);
        for (auto& x : v) x = ggml_fp32_to_fp16(dist(gen));
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    } else {
        throw std::runtime_error(std::string("unexpected tensor type for ") + t->name);
    }
}

// llama_model_save_to_file does not write the chat template: copy the saved file with it added.
void add_chat_template(const std::string& from, const std::string& to) {
    ggml_context* data = nullptr;
    gguf_init_params params{false, &data};
    gguf_context* src = gguf_init_from_file(from.c_str(), params);
    if (!src) throw std::runtime_error("cannot reopen " + from);
    gguf_context* dst = gguf_init_empty();
    gguf_set_kv(dst, src);
    gguf_set_val_str(dst, "tokenizer.chat_template", chat_template);
    for (int64_t i = 0; i < gguf_get_n_tensors(src); ++i) {
        gguf_add_tensor(dst, ggml_get_tensor(data, gguf_get_tensor_name(src, i)));
    }
    const bool ok = gguf_write_to_file(dst, to.c_str(), false);
    gguf_free(dst);
    gguf_free(src);
    ggml_free(data);
    if (!ok) throw std::runtime_error("cannot write " + to);
}

int run(int argc, char** argv) {
    std::string arch = "llama", preset = "tiny", out;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--arch") arch = v;
        else if (a == "--preset") preset = v;
        else if (a == "--seed") seed = std::stoull(v);
        else if (a == "--out") out = v;
        else throw std::runtime_error("unknown option " + a);
    }
    if (out.empty()) throw std::runtime_error("usage: gen-model --arch A --preset P --seed N --out FILE");

    llama_log_set([](ggml_log_level level, const char* text, void*) {
        if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    gguf_context* meta = gguf_init_empty();
    add_hparams(meta, arch, preset_shape(preset));
    add_tokenizer(meta);
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_init_from_user(meta, set_random, &seed, mp);
    if (!model) throw std::runtime_error("llama.cpp refused the model metadata");
    const std::string tmp = out + ".tmp";
    llama_model_save_to_file(model, tmp.c_str());
    llama_model_free(model);
    gguf_free(meta);
    const std::string tmp2 = out + ".tmp2";
    add_chat_template(tmp, tmp2);
    std::remove(tmp.c_str());
    if (std::rename(tmp2.c_str(), out.c_str()) != 0) throw std::runtime_error("cannot rename to " + out);
    llama_backend_free();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gen-model: %s\n", e.what());
        return 1;
    }
}
