// Prefix fingerprints. Every hashed item is framed as (tag byte, 64-bit length, bytes), so the
// stream of items decodes one way only: "ab"+"c" and "a"+"bc" differ, and so do a role and a
// content that swap places. A segment's items go into one XXH3 streaming state; the level hash
// chains the previous level with the segment hash, the header hash being level -1.
#include "routing/fingerprint.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace warmslot::routing {
namespace {

using nlohmann::json;

// Item tags. Changing any of them, or the framing, changes every fingerprint: bump
// fingerprint_format_version with it.
enum class tag : std::uint8_t {
    version = 1,
    kind,
    key,
    json_value,  // any JSON value, as its compact dump()
    absent,      // an optional message field that is not there
    text,        // a string: a string field, a string content, a text part, a prompt chunk
    part,        // a non-text content part, as its dump()
    tokens,      // a chunk of token ids, 4 bytes little-endian each
    role_field,  // the markers below start each message field in a fixed order
    name_field,
    content_field,
    tool_calls_field,
    tool_call_id_field,
    reasoning_field,
};

void store_le64(unsigned char* out, std::uint64_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(out, &v, sizeof v);
    } else {
        for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
    }
}

void store_le32(unsigned char* out, std::uint32_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(out, &v, sizeof v);
    } else {
        for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
    }
}

// One XXH3-64 streaming state fed with framed items. Items are mostly a few bytes (a frame
// header, a role), so they are gathered in a local buffer and handed to XXH3 in larger pieces:
// a streaming hash does not depend on how its input is split.
class stream_hash {
  public:
    stream_hash() noexcept { XXH3_64bits_reset(&state_); }
    stream_hash(const stream_hash&) = delete;
    stream_hash& operator=(const stream_hash&) = delete;

    void put(tag t, std::string_view bytes) noexcept { put_raw(t, bytes.data(), bytes.size()); }
    void put_raw(tag t, const void* data, std::size_t size) noexcept {
        put_header(t, size);
        append(data, size);
    }
    // An item whose bytes come in pieces: the header with the total size, then append()s.
    void put_header(tag t, std::uint64_t size) noexcept {
        unsigned char frame[9];
        frame[0] = static_cast<unsigned char>(t);
        store_le64(frame + 1, size);
        append(frame, sizeof frame);
    }
    void append(const void* data, std::size_t size) noexcept {
        if (size == 0) return;  // an empty string's data() may be null: not for memcpy
        if (size > buffer_.size() - used_) {
            flush();
            if (size >= buffer_.size()) {
                XXH3_64bits_update(&state_, data, size);
                return;
            }
        }
        std::memcpy(buffer_.data() + used_, data, size);
        used_ += size;
    }
    [[nodiscard]] std::uint64_t digest() noexcept {
        flush();
        return XXH3_64bits_digest(&state_);
    }

  private:
    void flush() noexcept {
        if (used_ == 0) return;
        XXH3_64bits_update(&state_, buffer_.data(), used_);
        used_ = 0;
    }

    XXH3_state_t state_{};
    std::array<unsigned char, 512> buffer_;
    std::size_t used_ = 0;
};

std::uint64_t chain(std::uint64_t previous, std::uint64_t segment) noexcept {
    std::array<unsigned char, 16> both{};
    store_le64(both.data(), previous);
    store_le64(both.data() + 8, segment);
    return XXH3_64bits(both.data(), both.size());
}

// Bodies are parsed from the wire, so strings are valid UTF-8; a body built in code may not be,
// and the fingerprint must not throw for it.
std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// The fields besides the segmented one that reach the rendered prompt or the KV cache: what
// llama-server's oaicompat_chat_params_parse hands to the chat template (tools, tool_choice,
// parallel_tool_calls, the generation-prompt and continuation switches, the reasoning format,
// chat_template_kwargs, reasoning_effort, and the JSON schema, which some tool-call formats
// write into the prompt), "lora" (the adapters change what the slot's cache holds) and, for
// completions, "multimodal_data" (its media replace markers in the prompt). Nothing else enters
// the header: sampling and output settings, "model" (the backend it names is chosen before any
// prefix is compared, and slot files are keyed by the model's identity), and whatever a client
// adds per session or per request (prompt_cache_key, metadata, user, client ids, store, include)
// would give the same prompt a new key every time.
// Length first, then bytes: most keys differ from a candidate in their length.
constexpr bool shorter_first(std::string_view a, std::string_view b) noexcept {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
}

constexpr auto chat_header_fields = [] {
    auto fields = std::to_array<std::string_view>({
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "add_generation_prompt",
        "continue_final_message",
        "reasoning_format",
        "chat_template_kwargs",
        "reasoning_effort",
        "response_format",
        "json_schema",
        "lora",
    });
    std::sort(fields.begin(), fields.end(), shorter_first);
    return fields;
}();

constexpr auto completion_header_fields = [] {
    auto fields = std::to_array<std::string_view>({"lora", "multimodal_data"});
    std::sort(fields.begin(), fields.end(), shorter_first);
    return fields;
}();

bool in_header(request_kind kind, std::string_view key) {
    if (kind == request_kind::chat) {
        return std::binary_search(chat_header_fields.begin(), chat_header_fields.end(), key,
                                  shorter_first);
    }
    return std::binary_search(completion_header_fields.begin(), completion_header_fields.end(), key,
                              shorter_first);
}

// A string dump() writes as it is between quotes: printable ASCII without '"' and '\\'.
bool dumps_verbatim(std::string_view s) noexcept {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; });
}

// A value as the json_value item dump() gives, without building the text for plain strings.
void put_json_value(stream_hash& h, const json& v) {
    if (const auto* s = v.get_ptr<const std::string*>(); s != nullptr && dumps_verbatim(*s)) {
        h.put_header(tag::json_value, s->size() + 2);
        h.append("\"", 1);
        h.append(s->data(), s->size());
        h.append("\"", 1);
        return;
    }
    h.put(tag::json_value, dump(v));
}

bool is_string(const json* v, std::string_view text) noexcept {
    const auto* s = v == nullptr ? nullptr : v->get_ptr<const std::string*>();
    return s != nullptr && *s == text;
}

std::uint64_t header_hash(request_kind kind, const json& body) {
    const std::string_view segment_field = kind == request_kind::chat ? "messages" : "prompt";
    stream_hash h;
    const std::uint32_t version = fingerprint_format_version;
    h.put_raw(tag::version, &version, sizeof version);
    h.put(tag::kind, segment_field);
    for (const auto& [key, value] : body.get_ref<const json::object_t&>()) {  // sorted by key
        if (!in_header(kind, key)) continue;
        h.put(tag::key, key);
        put_json_value(h, value);
    }
    return h.digest();
}

// A plain field value; returns the bytes it adds to the segment's size.
std::uint64_t put_value(stream_hash& h, const json* v, bool counts) {
    if (v == nullptr) {
        h.put(tag::absent, {});
        return 0;
    }
    if (v->is_string()) {
        const auto& s = v->get_ref<const std::string&>();
        h.put(tag::text, s);
        return counts ? s.size() : 0;
    }
    const std::string text = dump(*v);
    h.put(tag::json_value, text);
    return counts && !v->is_null() ? text.size() : 0;
}

const json* find(const json& object, std::string_view key) {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
}

bool is_text_part(const json& part) {
    if (!part.is_object()) return false;
    const json* text = find(part, "text");
    return is_string(find(part, "type"), "text") && text != nullptr && text->is_string();
}

// A string content is one text item and an array hashes each text part as the same kind of
// item, so [{"type":"text","text":"x"}] equals "x" (templates render them alike).
std::uint64_t put_content(stream_hash& h, const json* content) {
    if (content == nullptr || !content->is_array()) return put_value(h, content, true);
    std::uint64_t bytes = 0;
    for (const auto& part : *content) {
        if (is_text_part(part)) {
            const auto& s = part["text"].get_ref<const std::string&>();
            h.put(tag::text, s);
            bytes += s.size();
        } else {
            const std::string text = dump(part);
            h.put(tag::part, text);
            bytes += text.size();
        }
    }
    return bytes;
}

struct segment {
    std::uint64_t hash = 0;
    std::uint64_t bytes = 0;
};

// Bytes count the content and the tool calls (templates render both into the prompt), not the
// reasoning (templates often drop it from earlier turns) nor the short role/name/id fields.
segment hash_message(const json& message) {
    // One pass over the (usually two) fields rather than a lookup for each one hashed.
    const json *role = nullptr, *name = nullptr, *content = nullptr, *tool_calls = nullptr,
               *tool_call_id = nullptr, *reasoning = nullptr;
    for (const auto& [key, value] : message.get_ref<const json::object_t&>()) {
        if (key == "role")
            role = &value;
        else if (key == "content")
            content = &value;
        else if (key == "name")
            name = &value;
        else if (key == "tool_calls")
            tool_calls = &value;
        else if (key == "tool_call_id")
            tool_call_id = &value;
        else if (key == "reasoning_content")
            reasoning = &value;
    }
    stream_hash h;
    std::uint64_t bytes = 0;
    h.put(tag::role_field, {});
    put_value(h, role, false);
    h.put(tag::name_field, {});
    put_value(h, name, false);
    h.put(tag::content_field, {});
    bytes += put_content(h, content);
    h.put(tag::tool_calls_field, {});
    bytes += put_value(h, tool_calls, true);
    h.put(tag::tool_call_id_field, {});
    put_value(h, tool_call_id, false);
    h.put(tag::reasoning_field, {});
    put_value(h, reasoning, false);
    return {h.digest(), bytes};
}

void append_level(fingerprint& fp, std::uint64_t previous, segment s) {
    fp.total_bytes += s.bytes;
    fp.levels.push_back({chain(previous, s.hash), fp.total_bytes});
}

std::optional<fingerprint> fingerprint_chat(const json& body, std::uint64_t header) {
    const json* messages = find(body, "messages");
    if (messages == nullptr || !messages->is_array() || messages->empty()) return std::nullopt;
    fingerprint fp;
    fp.levels.reserve(messages->size());
    std::uint64_t previous = header;
    std::size_t last_user = messages->size();
    for (std::size_t i = 0; i < messages->size(); ++i) {
        const json& message = (*messages)[i];
        if (!message.is_object()) return std::nullopt;
        const segment s = hash_message(message);
        append_level(fp, previous, s);
        previous = fp.levels.back().hash;
        fp.longest_segment_bytes = std::max(fp.longest_segment_bytes, s.bytes);
        if (is_string(find(message, "role"), "user")) last_user = i;
    }
    fp.stable_levels = last_user;
    return fp;
}

std::optional<fingerprint> fingerprint_text(std::string_view prompt, std::uint64_t header) {
    if (prompt.empty()) return std::nullopt;
    fingerprint fp;
    fp.levels.reserve(prompt.size() / completion_chunk_bytes + 1);
    std::uint64_t previous = header;
    for (std::size_t at = 0; at < prompt.size(); at += completion_chunk_bytes) {
        const std::string_view chunk = prompt.substr(at, completion_chunk_bytes);
        stream_hash h;
        h.put(tag::text, chunk);
        append_level(fp, previous, {h.digest(), chunk.size()});
        previous = fp.levels.back().hash;
    }
    fp.stable_levels = prompt.size() / completion_chunk_bytes;
    fp.longest_segment_bytes = fp.total_bytes;
    return fp;
}

// Token ids carry no text, so their bytes are an estimate: about 3 bytes of text per token, in
// line with the planner's default of 0.3 tokens per byte.
constexpr std::uint64_t estimated_bytes_per_token = 3;

// A token id as llama-server accepts it: a non-negative integer that fits 32 bits (vocabularies
// are far smaller). Anything else makes the prompt one we do not fingerprint.
std::optional<std::uint32_t> token_id(const json& v) noexcept {
    constexpr std::uint64_t max_id = UINT32_MAX;
    if (const auto* u = v.get_ptr<const json::number_unsigned_t*>()) {
        if (*u <= max_id) return static_cast<std::uint32_t>(*u);
    } else if (const auto* i = v.get_ptr<const json::number_integer_t*>()) {
        if (*i >= 0 && static_cast<std::uint64_t>(*i) <= max_id) {
            return static_cast<std::uint32_t>(*i);
        }
    }
    return std::nullopt;
}

std::optional<fingerprint> fingerprint_tokens(const json& prompt, std::uint64_t header) {
    const auto& ids = prompt.get_ref<const json::array_t&>();  // plain vector: fast to walk
    fingerprint fp;
    fp.levels.reserve(ids.size() / completion_chunk_tokens + 1);
    std::array<unsigned char, completion_chunk_tokens * 4> buffer{};
    std::uint64_t previous = header;
    std::size_t in_chunk = 0;
    const auto flush = [&] {
        stream_hash h;
        h.put_raw(tag::tokens, buffer.data(), in_chunk * 4);
        append_level(fp, previous, {h.digest(), in_chunk * estimated_bytes_per_token});
        previous = fp.levels.back().hash;
        in_chunk = 0;
    };
    for (const auto& v : ids) {
        const auto id = token_id(v);
        if (!id) return std::nullopt;
        store_le32(buffer.data() + in_chunk * 4, *id);
        if (++in_chunk == completion_chunk_tokens) flush();
    }
    if (in_chunk > 0) flush();
    fp.stable_levels = ids.size() / completion_chunk_tokens;
    fp.longest_segment_bytes = fp.total_bytes;
    return fp;
}

// "prompt": a string, an array of token ids, or a one-element array holding either. Anything
// else (a batch, mixed strings and ids, an empty prompt) is not fingerprinted.
std::optional<fingerprint> fingerprint_completion(const json& body, std::uint64_t header) {
    const json* prompt = find(body, "prompt");
    if (prompt == nullptr) return std::nullopt;
    if (prompt->is_array() && prompt->size() == 1 && !(*prompt)[0].is_number()) {
        prompt = &(*prompt)[0];
    }
    if (prompt->is_string()) {
        return fingerprint_text(prompt->get_ref<const std::string&>(), header);
    }
    if (prompt->is_array() && !prompt->empty()) return fingerprint_tokens(*prompt, header);
    return std::nullopt;
}

}  // namespace

std::optional<fingerprint> fingerprint_request(request_kind kind, const nlohmann::json& body) {
    if (!body.is_object()) return std::nullopt;
    const std::uint64_t header = header_hash(kind, body);
    auto fp = kind == request_kind::chat ? fingerprint_chat(body, header)
                                         : fingerprint_completion(body, header);
    if (fp) {
        const json* model = find(body, "model");
        if (model != nullptr && model->is_string()) fp->model = model->get<std::string>();
    }
    return fp;
}

std::size_t common_levels(const std::vector<prefix_level>& a,
                          const std::vector<prefix_level>& b) noexcept {
    const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    return static_cast<std::size_t>(ia - a.begin());
}

}  // namespace warmslot::routing
