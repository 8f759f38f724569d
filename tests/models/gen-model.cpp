// Writes a random-weight GGUF model for tests and benchmarks.
//
//   gen-model --arch llama|qwen35|gemma2 --preset tiny|bench --seed N --out FILE
//
// The weights are random (seeded, deterministic); the tokenizer is real: a byte-level BPE
// vocabulary (one token per UTF-8 byte, so any text round-trips exactly) plus the ChatML
// control tokens, and a ChatML chat template. llama.cpp itself creates the tensors from the
// metadata (llama_model_init_from_user), so the shapes always match the linked llama.cpp.
#include <cmath>
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
    uint32_t ssm_state, ssm_groups, ssm_v_heads;  // hybrid (qwen35) only
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

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// How the weights are drawn. The answer must depend on the prompt (a test that compares answers
// proves nothing otherwise) and must not depend on how the prompt was split into batches: the
// CPU flash-attention kernels accumulate in f16 for one query and in f32 for a tile of queries,
// so the same request computed from scratch and on a warm slot differs by rounding.
//   - Norms, scales and rope factors are 1, biases 0, matrices N(0, gain / sqrt(fan_in)): every
//     layer's output is about as large as its input, so the context reaches the logits.
//   - Attention queries and keys have gain 6 (on qwen35's query and key norms): scores of std
//     about 36, so each head reads about one key, chosen by content and position. That makes the
//     answer depend on the document, and it leaves the f16 accumulation almost nothing to round:
//     the logits of a warm slot and of a from-scratch run differ by about 1e-4, far below the gap
//     between the best two tokens.
//   - Values and attention outputs have gain 3 so that what a head reads outweighs the current
//     token's own embedding.
struct tuning {
    double qk_gain = 6, vo_gain = 3;
    double embd_std = 1, embd_const = 1, non_ascii = 100;  // dimension 0, see steer_to_ascii
    double post_norm = 1;                                  // gemma2's norms after each block
    bool tied_output = false;                              // gemma2 reads token_embd as output
    bool qk_norm = false;  // qwen35 normalises queries and keys: the gain goes on the norms
};

tuning arch_tuning(const std::string& arch) {
    tuning t;
    if (arch == "qwen35") t.qk_norm = true;
    if (arch == "gemma2") {
        // gemma2 scales embeddings by sqrt(n_embd) and reads its output through them: small
        // embeddings, and larger block outputs, or every token would predict itself.
        t.embd_std = 0.02;
        t.embd_const = 0.02;
        t.non_ascii = 50;
        t.post_norm = 3;
        t.tied_output = true;
    }
    return t;
}

struct init {
    double constant;  // every element, when std is 0
    double std;
};

init tensor_init(const tuning& k, const std::string& name, size_t fan_in) {
    const double g = 1.0 / std::sqrt(static_cast<double>(fan_in));
    if (ends_with(name, ".scale") || ends_with(name, ".input_scale") || name == "rope_freqs.weight")
        return {1, 0};
    if (has(name, "attn_q_norm") || has(name, "attn_k_norm")) return {k.qk_gain, 0};
    if (has(name, "post_attention_norm") || has(name, "post_ffw_norm")) return {k.post_norm, 0};
    if (has(name, "norm.weight")) return {1, 0};
    if (has(name, "ssm_dt")) return {-2, 0};   // softplus(-2 + alpha): a slow decay
    if (has(name, "ssm_a")) return {-0.1, 0};  // negative: the recurrent state decays, never grows
    if (ends_with(name, ".bias")) return {0, 0};
    if (name == "token_embd.weight") return {0, k.embd_std};
    if (has(name, "attn_q.") || has(name, "attn_k.")) return {0, (k.qk_norm ? 1 : k.qk_gain) * g};
    if (has(name, "attn_v.") || has(name, "attn_output.") || has(name, "attn_qkv."))
        return {0, k.vo_gain * g};
    return {0, g};
}

// Random weights emit random bytes, and a reply cut inside a UTF-8 sequence makes the server's
// chat parser fail. Dimension 0 of the residual stream is a constant: every token embedding has
// it and no layer writes to it (row 0 of every matrix that adds to the residual is zero). The
// output layer ignores it for printable ASCII and reads it with a large negative weight for every
// other token, so greedy decoding writes plain ASCII text and never ends on a control token,
// while the choice among printable characters is left to the rest of the network. A tied output
// (gemma2) reads the embedding itself, so there the other tokens' embeddings carry the negative
// weight; a prompt that ends in ASCII (every chat prompt does) still gets an ASCII answer.
void steer_to_ascii(const tuning& k, const std::string& name, size_t n_in, std::vector<float>& v) {
    const size_t rows = v.size() / n_in;
    const auto ascii = [](size_t r) { return (r >= 32 && r < 127) || r == '\n'; };
    if (name == "token_embd.weight") {
        for (size_t r = 0; r < rows; ++r) {
            const bool negative = k.tied_output && !ascii(r);
            v[r * n_in] = static_cast<float>(negative ? -k.non_ascii : k.embd_const);
        }
    } else if (name == "output.weight") {
        for (size_t r = 0; r < rows; ++r)
            v[r * n_in] = ascii(r) ? 0.0f : static_cast<float>(-k.non_ascii);
    } else if (has(name, "attn_output.weight") || has(name, "ffn_down.weight") ||
               has(name, "ssm_out.weight")) {
        for (size_t i = 0; i < n_in; ++i) v[i] = 0.0f;
    }
}

struct gen_args {
    uint64_t seed;
    tuning k;
};

void set_random(ggml_tensor* t, void* userdata) {
    const auto& a = *static_cast<const gen_args*>(userdata);
    // Seed per tensor from its name so the result does not depend on creation order.
    uint64_t h = 1469598103934665603ull ^ a.seed;
    for (const char* p = t->name; *p; ++p)
        h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
    std::mt19937_64 gen(h);
    const auto n = static_cast<size_t>(ggml_nelements(t));
    const auto fan_in = static_cast<size_t>(t->ne[0]);
    const init how = tensor_init(a.k, t->name, fan_in);
    std::normal_distribution<double> dist(0.0, how.std > 0 ? how.std : 1.0);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(how.std > 0 ? dist(gen) : how.constant);
    steer_to_ascii(a.k, t->name, fan_in, v);
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> h16(n);
        for (size_t i = 0; i < n; ++i) h16[i] = ggml_fp32_to_fp16(v[i]);
        ggml_backend_tensor_set(t, h16.data(), 0, ggml_nbytes(t));
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
        if (a == "--arch")
            arch = v;
        else if (a == "--preset")
            preset = v;
        else if (a == "--seed")
            seed = std::stoull(v);
        else if (a == "--out")
            out = v;
        else
            throw std::runtime_error("unknown option " + a);
    }
    if (out.empty())
        throw std::runtime_error("usage: gen-model --arch A --preset P --seed N --out FILE");

    llama_log_set(
        [](ggml_log_level level, const char* text, void*) {
            if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
        },
        nullptr);
    llama_backend_init();
    gguf_context* meta = gguf_init_empty();
    add_hparams(meta, arch, preset_shape(preset));
    add_tokenizer(meta);
    gen_args args{seed, arch_tuning(arch)};
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_init_from_user(meta, set_random, &args, mp);
    if (!model) throw std::runtime_error("llama.cpp refused the model metadata");
    const std::string tmp = out + ".tmp";
    llama_model_save_to_file(model, tmp.c_str());
    llama_model_free(model);
    gguf_free(meta);
    const std::string tmp2 = out + ".tmp2";
    add_chat_template(tmp, tmp2);
    std::remove(tmp.c_str());
    if (std::rename(tmp2.c_str(), out.c_str()) != 0)
        throw std::runtime_error("cannot rename to " + out);
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
