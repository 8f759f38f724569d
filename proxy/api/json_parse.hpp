// Parsing request bodies into nlohmann::json, faster than nlohmann's own lexer. Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace warmslot::api {

// Exactly what `nlohmann::json::parse(text, nullptr, false)` returns: the same values and
// number types, the last of duplicate keys, and a discarded value for anything nlohmann
// rejects. Plain documents (strings with validated UTF-8 and standard escapes, integers of up
// to 18 digits, finite decimals, nesting up to 128) take a fast recursive-descent path; every
// other text, including every invalid one, is handed to nlohmann as a whole.
nlohmann::json parse_json(std::string_view text);

}  // namespace warmslot::api
