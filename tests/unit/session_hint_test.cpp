// Session hints: where they are read from, and what is not a hint.
#include "api/session_hint.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

using nlohmann::json;
using warmslot::api::session_hint;

TEST_CASE("session hints: prompt_cache_key first, then the session header") {
    const json keyed = {{"prompt_cache_key", "0199a2-codex"}, {"input", "hi"}};
    const json plain = {{"input", "hi"}};
    CHECK(session_hint(&keyed, "") != 0);
    CHECK(session_hint(&keyed, "other") == session_hint(&keyed, ""));
    CHECK(session_hint(&plain, "0199a2-codex") == session_hint(&keyed, ""));
    CHECK(session_hint(&plain, "s-1") != session_hint(&plain, "s-2"));
    CHECK(session_hint(nullptr, "s-1") == session_hint(&plain, "s-1"));
}

TEST_CASE("session hints: none, empty, wrongly typed or oversized values give no hint") {
    const json empty_key = {{"prompt_cache_key", ""}};
    const json number_key = {{"prompt_cache_key", 42}};
    CHECK(session_hint(nullptr, "") == 0);
    CHECK(session_hint(&empty_key, "") == 0);
    CHECK(session_hint(&number_key, "") == 0);
    CHECK(session_hint(&number_key, "s-1") == session_hint(nullptr, "s-1"));
    const std::string huge(warmslot::api::max_session_hint_bytes + 1, 'x');
    CHECK(session_hint(nullptr, huge) == 0);
    const json array_body = json::array({1, 2});
    CHECK(session_hint(&array_body, "s-1") == session_hint(nullptr, "s-1"));
}
