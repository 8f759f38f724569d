// Parsing request bodies into nlohmann::json, faster than nlohmann's own lexer. Pure.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace warmslot::api {

// Arrays and objects nested deeper than this are refused: the values are copied, dumped and
// fingerprinted recursively later.
inline constexpr int max_json_depth = 128;

// Exactly what `nlohmann::json::parse(text, nullptr, false)` returns: the same values and
// number types, the last of duplicate keys, and a discarded value for anything nlohmann
// rejects, except that a document nested deeper than max_json_depth is discarded too. Plain
// documents (strings with validated UTF-8 and standard escapes, integers of up to 18 digits,
// finite decimals) take a fast recursive-descent path; every other text, including every
// invalid one, is handed to nlohmann as a whole once its depth is known to be in bounds.
nlohmann::json parse_json(std::string_view text);

}  // namespace warmslot::api
