#include "fake_llama_model.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace warmslot::testing {
namespace {

using nlohmann::json;

constexpr std::string_view im_start_text = "<|im_start|>";
constexpr std::string_view im_end_text = "<|im_end|>";
constexpr std::uint32_t state_seq_magic = 0x67677371u;  // 'ggsq', llama.h
constexpr std::size_t state_bytes_per_token = 8;        // the fake's "KV"

fake_reply json_reply(unsigned status, const json& body) {
    fake_reply r;
    r.status = status;
    r.body = body.dump();
    return r;
}

fake_reply error_reply(unsigned status, const std::string& message) {
    const char* type = status == 400   ? "invalid_request_error"
                       : status == 404 ? "not_found_error"
                       : status == 501 ? "not_supported_error"
                                       : "server_error";
    return json_reply(status,
                      {{"error", {{"code", status}, {"message", message}, {"type", type}}}});
}

std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

std::string query_value(const std::string& target, const std::string& name) {
    const auto q = target.find('?');
    if (q == std::string::npos) return "";
    const std::string query = "&" + target.substr(q + 1);
    const auto at = query.find("&" + name + "=");
    if (at == std::string::npos) return "";
    const auto start = at + name.size() + 2;
    return query.substr(start, query.find('&', start) - start);
}

// "save", "restore", "erase" for POST /slots/N?action=X, else the path.
std::pair<std::string, int> key_of(const std::string& method, const std::string& target) {
    const auto path = path_of(target);
    if (method == "POST" && path.starts_with("/slots/")) {
        try {
            return {query_value(target, "action"), std::stoi(path.substr(7))};
        } catch (const std::exception&) {
            return {query_value(target, "action"), -1};
        }
    }
    return {path, -1};
}

std::string text_of(const json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string out;
    if (content.is_array()) {
        for (const auto& part : content) {
            if (part.is_object() && part.value("type", "") == "text") out += part.value("text", "");
        }
    }
    return out;
}

std::size_t common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
    const auto n = std::min(a.size(), b.size());
    std::size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

void put_u32(std::string& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint32_t get_u32(const std::string& in, std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
        v = v << 8 | static_cast<unsigned char>(in[at + static_cast<std::size_t>(i)]);
    return v;
}

bool plain_file_name(const std::string& f) {
    return !f.empty() && f.find('/') == std::string::npos && f.find("..") == std::string::npos;
}

}  // namespace

std::vector<int> fake_tokenize(std::string_view text, bool add_special, bool parse_special) {
    std::vector<int> out;
    out.reserve(text.size() + 1);
    if (add_special) out.push_back(fake_bos);
    for (std::size_t i = 0; i < text.size();) {
        if (parse_special && text.substr(i).starts_with(im_start_text)) {
            out.push_back(fake_im_start);
            i += im_start_text.size();
        } else if (parse_special && text.substr(i).starts_with(im_end_text)) {
            out.push_back(fake_im_end);
            i += im_end_text.size();
        } else {
            out.push_back(fake_byte_base + static_cast<unsigned char>(text[i]));
            ++i;
        }
    }
    return out;
}

std::optional<std::string> fake_render(const std::string& chat_body) {
    const auto body = json::parse(chat_body, nullptr, false);
    if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array())
        return std::nullopt;
    std::string out;
    for (const auto& m : body["messages"]) {
        if (!m.is_object()) return std::nullopt;
        out += std::string(im_start_text) + m.value("role", "user") + "\n" +
               text_of(m.value("content", json())) + std::string(im_end_text) + "\n";
    }
    if (body.value("add_generation_prompt", true))
        out += std::string(im_start_text) + "assistant\n";
    return out;
}

void write_fake_gguf(const std::string& path, const std::string& arch) {
    std::string out = "GGUF";
    const auto u64 = [&](std::uint64_t v) {
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    const auto str = [&](const std::string& s) {
        u64(s.size());
        out += s;
    };
    put_u32(out, 3);  // version
    u64(1);           // tensors
    u64(2);           // key-value pairs
    str("general.architecture");
    put_u32(out, 8);  // string
    str(arch);
    str("general.alignment");
    put_u32(out, 4);  // u32
    put_u32(out, 64);
    str("weights");  // one f32 tensor of 1024 values
    put_u32(out, 1);
    u64(1024);
    put_u32(out, 0);
    u64(0);
    while (out.size() % 64 != 0) out.push_back('\0');
    for (std::uint32_t i = 0; i < 1024; ++i) put_u32(out, i * 2654435761u);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary)
        .write(out.data(), static_cast<std::streamsize>(out.size()));
}

fake_model::fake_model(fake_options o)
    : opt_(std::move(o)), slots_(static_cast<std::size_t>(opt_.slots)) {
    if (!opt_.architecture.empty()) write_fake_gguf(opt_.model_path, opt_.architecture);
}

std::size_t fake_model::record(std::string method, std::string target, std::string body) {
    std::lock_guard lock(mu_);
    fake_call c;
    std::tie(c.key, c.slot) = key_of(method, target);
    c.method = std::move(method);
    c.target = std::move(target);
    c.body = std::move(body);
    c.at = std::chrono::steady_clock::now();
    calls_.push_back(std::move(c));
    changed();
    return calls_.size() - 1;
}

void fake_model::answered(std::size_t call, unsigned status) {
    std::lock_guard lock(mu_);
    calls_[call].status = status;
    changed();
}

std::optional<fake_model::fault> fake_model::take_fault(const std::string& key) {
    auto it = faults_.find(key);
    if (it == faults_.end() || it->second.empty()) return std::nullopt;
    auto f = it->second.front();
    if (--it->second.front().times == 0) it->second.pop_front();
    return f;
}

std::chrono::milliseconds fake_model::take_delay(std::size_t call) {
    std::lock_guard lock(mu_);
    auto it = delays_.find(calls_[call].key);
    if (it == delays_.end() || it->second.times == 0) return std::chrono::milliseconds(0);
    if (it->second.times > 0) --it->second.times;
    return it->second.d;
}

std::optional<fake_reply> fake_model::handle(std::size_t call) {
    std::lock_guard lock(mu_);
    auto r = answer(call);
    if (r) {
        calls_[call].handled = true;
        changed();
    }
    return r;
}

std::optional<fake_reply> fake_model::answer(std::size_t call) {
    const fake_call c = calls_[call];
    const bool slot_action = c.key == "save" || c.key == "restore" || c.key == "erase";
    // Save and restore wait for a busy slot, as llama-server's do (they run between tasks).
    if (slot_action && c.slot >= 0 && c.slot < opt_.slots &&
        slots_[static_cast<std::size_t>(c.slot)].processing)
        return std::nullopt;
    auto f = take_fault(c.key);
    if (f && c.key == "save") {
        auto r = save(c.slot, json::parse(c.body, nullptr, false).value("filename", ""), f);
        changed();
        return r;
    }
    if (f) {
        if (c.key == "restore" && c.slot >= 0 && c.slot < opt_.slots)
            slots_[static_cast<std::size_t>(c.slot)].tokens.clear();
        changed();
        return error_reply(f->status, f->message);
    }
    fake_reply r;
    if (slot_action) {
        r = slot_action_reply(c);
    } else if (c.key == "/completion" || c.key == "/v1/chat/completions") {
        auto g = generate(c);
        if (!g) return std::nullopt;
        if (g->busy_slot >= 0) calls_[call].slot = g->busy_slot;
        r = std::move(*g);
    } else if (c.key == "/tokenize") {
        r = tokenize(c.body);
    } else if (c.key == "/apply-template") {
        r = apply_template(c.body);
    } else if (c.key == "/props") {
        r = props();
    } else if (c.key == "/slots" && c.method == "GET") {
        r = slots_json();
    } else if (c.key == "/metrics") {
        r = metrics();
    } else if (c.key == "/health") {
        r = json_reply(200, {{"status", "ok"}});
    } else if (c.key == "/v1/models" || c.key == "/models") {
        r = json_reply(
            200, {{"object", "list"},
                  {"data",
                   {{{"id", opt_.alias},
                     {"object", "model"},
                     {"meta", {{"n_vocab", 272}, {"n_ctx_train", opt_.n_ctx}, {"n_embd", 64}}}}}}});
    } else if (c.key == "/lora-adapters") {
        r = json_reply(200, json::array());
    } else {
        r = error_reply(404, "File Not Found");
    }
    changed();
    return r;
}

fake_reply fake_model::slot_action_reply(const fake_call& c) {
    if (c.slot < 0 || c.slot >= opt_.slots) return error_reply(400, "Invalid slot ID");
    const auto body = json::parse(c.body, nullptr, false);
    const std::string file = body.is_object() ? body.value("filename", "") : "";
    if (c.key == "save") return save(c.slot, file, std::nullopt);
    if (c.key == "restore") return restore(c.slot, file);
    auto& s = slots_[static_cast<std::size_t>(c.slot)];
    const auto n = s.tokens.size();
    s.tokens.clear();
    return json_reply(200, {{"id_slot", c.slot}, {"n_erased", n}});
}

fake_reply fake_model::save(int slot, const std::string& file, const std::optional<fault>& f) {
    if (opt_.slot_dir.empty()) return error_reply(501, "This server does not support slot save");
    if (slot < 0 || slot >= opt_.slots) return error_reply(400, "Invalid slot ID");
    if (!plain_file_name(file)) return error_reply(400, "Invalid filename");
    const auto& tokens = slots_[static_cast<std::size_t>(slot)].tokens;
    std::string bytes;
    put_u32(bytes, state_seq_magic);
    put_u32(bytes, 3);
    put_u32(bytes, static_cast<std::uint32_t>(tokens.size()));
    for (const int t : tokens) put_u32(bytes, static_cast<std::uint32_t>(t));
    bytes.append(tokens.size() * state_bytes_per_token, 'k');
    if (f) bytes.resize(bytes.size() / 2);  // the write broke off
    const auto path = std::filesystem::path(opt_.slot_dir) / file;
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (f) return error_reply(f->status, f->message);
    return json_reply(200, {{"id_slot", slot},
                            {"filename", file},
                            {"n_saved", tokens.size()},
                            {"n_written", bytes.size()},
                            {"timings", {{"save_ms", 0.5}}}});
}

fake_reply fake_model::restore(int slot, const std::string& file) {
    if (opt_.slot_dir.empty()) return error_reply(501, "This server does not support slot restore");
    auto& s = slots_[static_cast<std::size_t>(slot)];
    const auto fail = [&] {
        s.tokens.clear();  // llama-server wipes the slot on every failed restore
        return error_reply(400,
                           "Unable to restore slot, no available space in KV cache or "
                           "invalid slot save file");
    };
    if (!plain_file_name(file)) return error_reply(400, "Invalid filename");
    std::ifstream in(std::filesystem::path(opt_.slot_dir) / file, std::ios::binary);
    if (!in) return fail();
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (bytes.size() < 12 || get_u32(bytes, 0) != state_seq_magic) return fail();
    const std::uint64_t n = get_u32(bytes, 8);
    if (bytes.size() < 12 + n * (4 + state_bytes_per_token) || n > opt_.n_ctx) return fail();
    s.tokens.clear();
    for (std::uint64_t i = 0; i < n; ++i)
        s.tokens.push_back(static_cast<int>(get_u32(bytes, 12 + 4 * static_cast<std::size_t>(i))));
    return json_reply(200, {{"id_slot", slot},
                            {"filename", file},
                            {"n_restored", n},
                            {"n_read", bytes.size()},
                            {"timings", {{"restore_ms", 0.2}}}});
}

fake_reply fake_model::tokenize(const std::string& body_text) const {
    const auto body = json::parse(body_text, nullptr, false);
    if (!body.is_object()) return error_reply(500, "invalid JSON");
    const bool add = body.value("add_special", false);
    const bool parse = body.value("parse_special", true);
    const auto content = body.value("content", json());
    std::vector<int> tokens;
    if (content.is_string()) {
        tokens = fake_tokenize(content.get<std::string>(), add, parse);
    } else if (content.is_array()) {
        bool first = true;
        for (const auto& p : content) {
            if (p.is_number_integer()) {
                tokens.push_back(p.get<int>());
            } else if (p.is_string()) {
                const auto t = fake_tokenize(p.get<std::string>(), first && add, parse);
                tokens.insert(tokens.end(), t.begin(), t.end());
            }
            first = false;
        }
    }
    return json_reply(200, {{"tokens", tokens}});
}

fake_reply fake_model::apply_template(const std::string& body) const {
    const auto text = fake_render(body);
    if (!text) return error_reply(500, "messages must be an array");
    return json_reply(200, {{"prompt", *text}});
}

fake_reply fake_model::props() const {
    return json_reply(200, {{"total_slots", opt_.slots},
                            {"default_generation_settings", {{"n_ctx", opt_.n_ctx}}},
                            {"model_path", opt_.model_path},
                            {"model_alias", opt_.alias},
                            {"build_info", opt_.build_info},
                            {"chat_template", "chatml"},
                            {"bos_token", "<s>"},
                            {"is_sleeping", false}});
}

fake_reply fake_model::slots_json() {
    if (!scripted_slots_.empty()) {
        fake_reply r;
        r.body = std::move(scripted_slots_.front());
        scripted_slots_.pop_front();
        return r;
    }
    json out = json::array();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        const auto& s = slots_[i];
        json j = {{"id", i}, {"n_ctx", opt_.n_ctx}, {"is_processing", s.processing}};
        // A slot that never ran a task shows neither, even after a restore.
        if (s.task) {
            j["id_task"] = *s.task;
            j["n_prompt_tokens"] = s.tokens.size();
        }
        out.push_back(std::move(j));
    }
    return json_reply(200, out);
}

fake_reply fake_model::metrics() const {
    fake_reply r;
    r.body = "llamacpp:prompt_tokens_total " + std::to_string(prompt_tokens_total_) + "\n" +
             "llamacpp:requests_processing 0\n";
    return r;
}

int fake_model::pick_slot(const std::vector<int>& prompt) const {
    int best = -1;
    double best_share = 0.1;  // --slot-prompt-similarity
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].processing || prompt.empty()) continue;
        const double share = static_cast<double>(common_prefix(slots_[i].tokens, prompt)) /
                             static_cast<double>(prompt.size());
        if (share > best_share) {
            best_share = share;
            best = static_cast<int>(i);
        }
    }
    if (best >= 0) return best;
    for (std::size_t i = 0; i < slots_.size(); ++i) {  // least recently used
        if (slots_[i].processing) continue;
        if (best < 0 || slots_[i].last_used < slots_[static_cast<std::size_t>(best)].last_used)
            best = static_cast<int>(i);
    }
    return best;
}

std::uint64_t fake_model::reused(const slot_state& s, const std::vector<int>& prompt) const {
    auto n = common_prefix(s.tokens, prompt);
    if (opt_.reuse == fake_options::rollback::extension_only && n < s.tokens.size()) n = 0;
    if (opt_.reuse == fake_options::rollback::extension_only && n == prompt.size()) n = 0;
    if (n == prompt.size() && n > 0) --n;  // at least one prompt token is computed
    return n;
}

}  // namespace warmslot::testing
