#include "upstream/slot_api.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

namespace warmslot::upstream {

namespace {

using nlohmann::json;

slot_request post(slot_call c, std::string target, const json& body) {
    return {c, false, std::move(target), body.dump()};
}

// The answer's JSON when llama-server answered 200; null otherwise, discarded when not JSON.
json parsed(const call_end& e) {
    if (!e.ok()) return json();
    return json::parse(e.body, nullptr, false);
}

// A call's end with what `read` finds in its JSON answer.
template <typename T, typename Read>
slot_result<T> read_answer(call_end e, Read read) {
    auto answer = parsed(e);
    slot_result<T> r{std::move(e), std::nullopt};
    r.value = read(std::move(answer));
    return r;
}

// A field of the answer's timings; 0 when it has none.
double timing(const json& answer, const char* field) {
    const auto tm = answer.find("timings");
    return tm != answer.end() && tm->is_object() ? tm->value(field, 0.0) : 0.0;
}

}  // namespace

std::chrono::milliseconds timeout_for(slot_call c, const config::config& cfg) {
    switch (c) {
        case slot_call::save:
        case slot_call::restore:
        case slot_call::erase: return cfg.cache.slot_call_timeout;
        case slot_call::prime: return cfg.timeouts.upstream_response;
        case slot_call::slots:
        case slot_call::apply_template:
        case slot_call::tokenize: return query_timeout;
    }
    return query_timeout;
}

slot_request slots_request() { return {slot_call::slots, true, "/slots", ""}; }

slot_request apply_template_request(const json& chat_body) {
    return post(slot_call::apply_template, "/apply-template", chat_body);
}

slot_request tokenize_request(std::string text) {
    return post(slot_call::tokenize, "/tokenize",
                {{"content", std::move(text)}, {"add_special", true}, {"parse_special", true}});
}

slot_request tokenize_parts_request(const std::vector<std::string>& texts, bool first,
                                    bool parse_special) {
    json content = json::array();
    for (std::size_t i = 0; i < texts.size(); ++i) {
        if (i > 0 || !first) content.push_back(part_separator);
        content.push_back(texts[i]);
    }
    return post(slot_call::tokenize, "/tokenize",
                {{"content", std::move(content)},
                 {"add_special", first},
                 {"parse_special", parse_special}});
}

slot_request save_request(int slot, const std::string& file) {
    return post(slot_call::save, fmt::format("/slots/{}?action=save", slot), {{"filename", file}});
}

slot_request restore_request(int slot, const std::string& file) {
    return post(slot_call::restore, fmt::format("/slots/{}?action=restore", slot),
                {{"filename", file}});
}

slot_request erase_request(int slot) {
    return {slot_call::erase, false, fmt::format("/slots/{}?action=erase", slot), "{}"};
}

slot_request prime_request(int slot, const std::vector<int>& tokens) {
    return post(slot_call::prime, "/completion",
                {{"prompt", tokens},
                 {"n_predict", 1},
                 {"id_slot", slot},
                 {"cache_prompt", true},
                 {"temperature", 0}});
}

slot_result<json> read_slots_answer(call_end e) {
    return read_answer<json>(std::move(e), [](json answer) -> std::optional<json> {
        if (!answer.is_array()) return std::nullopt;
        return answer;
    });
}

slot_result<std::string> read_template_answer(call_end e) {
    return read_answer<std::string>(
        std::move(e), [](const json& answer) -> std::optional<std::string> {
            if (!answer.contains("prompt") || !answer["prompt"].is_string()) return std::nullopt;
            return answer["prompt"].get<std::string>();
        });
}

// {"tokens":[1,2,...]} read without building a JSON tree (a 100K-token answer is 600 KB of
// numbers); std::nullopt for anything else, which the JSON reader then reads.
std::optional<std::vector<int>> scan_tokens(std::string_view s) {
    std::size_t i = 0;
    const auto skip = [&] {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
    };
    const auto take = [&](std::string_view word) {
        skip();
        if (s.substr(i, word.size()) != word) return false;
        i += word.size();
        return true;
    };
    if (!take("{") || !take("\"tokens\"") || !take(":") || !take("[")) return std::nullopt;
    std::vector<int> out;
    out.reserve(s.size() / 6);
    skip();
    if (i < s.size() && s[i] == ']') {
        ++i;
    } else {
        for (;;) {
            skip();
            const bool negative = i < s.size() && s[i] == '-';
            if (negative) ++i;
            const std::size_t digits = i;
            std::int64_t v = 0;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - digits < 11) {
                v = v * 10 + (s[i] - '0');
                ++i;
            }
            if (i == digits || (i < s.size() && s[i] >= '0' && s[i] <= '9')) return std::nullopt;
            v = negative ? -v : v;
            if (v < INT32_MIN || v > INT32_MAX) return std::nullopt;
            out.push_back(static_cast<int>(v));
            skip();
            if (i < s.size() && s[i] == ',') {
                ++i;
                continue;
            }
            if (i < s.size() && s[i] == ']') {
                ++i;
                break;
            }
            return std::nullopt;
        }
    }
    if (!take("}")) return std::nullopt;
    skip();
    if (i != s.size()) return std::nullopt;
    return out;
}

slot_result<std::vector<int>> read_tokenize_answer(call_end e) {
    if (e.ok()) {
        if (auto fast = scan_tokens(e.body)) {
            slot_result<std::vector<int>> r{std::move(e), std::nullopt};
            r.value = std::move(fast);
            return r;
        }
    }
    return read_answer<std::vector<int>>(
        std::move(e), [](const json& answer) -> std::optional<std::vector<int>> {
            if (!answer.contains("tokens") || !answer["tokens"].is_array()) return std::nullopt;
            std::vector<int> out;
            for (const auto& t : answer["tokens"]) {
                // Token ids only: whole numbers in an int's range, never rounded or wrapped.
                if (t.is_number_integer() && !t.is_number_unsigned()) {
                    const auto v = t.get<std::int64_t>();
                    if (v < INT32_MIN || v > INT32_MAX) return std::nullopt;
                    out.push_back(static_cast<int>(v));
                } else if (t.is_number_unsigned() && t.get<std::uint64_t>() <= INT32_MAX) {
                    out.push_back(static_cast<int>(t.get<std::uint64_t>()));
                } else {
                    return std::nullopt;
                }
            }
            return out;
        });
}

slot_result<std::vector<std::vector<int>>> read_tokenize_parts_answer(call_end e) {
    auto r = read_tokenize_answer(std::move(e));
    slot_result<std::vector<std::vector<int>>> out{std::move(r.end), std::nullopt};
    if (!r.value) return out;
    out.value.emplace(1);
    for (const int t : *r.value) {
        if (t == part_separator)
            out.value->emplace_back();
        else
            out.value->back().push_back(t);
    }
    return out;
}

slot_result<saved> read_save_answer(call_end e) {
    return read_answer<saved>(std::move(e), [](const json& answer) -> std::optional<saved> {
        if (!answer.is_object()) return std::nullopt;
        return saved{answer.value("n_saved", std::uint64_t{0}),
                     answer.value("n_written", std::uint64_t{0}), timing(answer, "save_ms")};
    });
}

slot_result<restored> read_restore_answer(call_end e) {
    return read_answer<restored>(std::move(e), [](const json& answer) -> std::optional<restored> {
        if (!answer.is_object()) return std::nullopt;
        return restored{answer.value("n_restored", std::uint64_t{0}), timing(answer, "restore_ms")};
    });
}

slot_result<api::prompt_stats> read_prime_answer(call_end e) {
    slot_result<api::prompt_stats> r{std::move(e), std::nullopt};
    if (r.end.ok()) r.value = api::find_prompt_stats(r.end.body);
    return r;
}

}  // namespace warmslot::upstream
