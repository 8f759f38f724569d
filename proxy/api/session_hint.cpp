#include "api/session_hint.hpp"

#include <xxhash.h>

#include <nlohmann/json.hpp>

namespace warmslot::api {

namespace {

std::uint64_t hash_of(std::string_view s) {
    if (s.empty() || s.size() > max_session_hint_bytes) return 0;
    const std::uint64_t h = XXH3_64bits(s.data(), s.size());
    return h == 0 ? 1 : h;  // 0 means "no session"
}

}  // namespace

std::uint64_t session_hint(const nlohmann::json* body, std::string_view header) {
    if (body != nullptr && body->is_object()) {
        const auto it = body->find("prompt_cache_key");
        if (it != body->end() && it->is_string()) {
            if (const auto h = hash_of(it->get_ref<const std::string&>())) return h;
        }
    }
    return hash_of(header);
}

}  // namespace warmslot::api
