// Strict comparison of two nlohmann::json values for the parse_json tests and fuzzer.
#pragma once

#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

// Strict equality: same type at every level, doubles compared bitwise, keys in the same order.
inline bool json_same(const nlohmann::json& a, const nlohmann::json& b) {
    using nlohmann::json;
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case json::value_t::object: {
            const auto& x = a.get_ref<const json::object_t&>();
            const auto& y = b.get_ref<const json::object_t&>();
            if (x.size() != y.size()) return false;
            for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j) {
                if (i->first != j->first || !json_same(i->second, j->second)) return false;
            }
            return true;
        }
        case json::value_t::array: {
            const auto& x = a.get_ref<const json::array_t&>();
            const auto& y = b.get_ref<const json::array_t&>();
            if (x.size() != y.size()) return false;
            for (std::size_t i = 0; i < x.size(); ++i) {
                if (!json_same(x[i], y[i])) return false;
            }
            return true;
        }
        case json::value_t::string:
            return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
        case json::value_t::boolean: return a.get<bool>() == b.get<bool>();
        case json::value_t::number_integer: return a.get<std::int64_t>() == b.get<std::int64_t>();
        case json::value_t::number_unsigned:
            return a.get<std::uint64_t>() == b.get<std::uint64_t>();
        case json::value_t::number_float:
            return std::bit_cast<std::uint64_t>(a.get<double>()) ==
                   std::bit_cast<std::uint64_t>(b.get<double>());
        case json::value_t::binary: return a.get_binary() == b.get_binary();
        case json::value_t::null:
        case json::value_t::discarded: return true;
    }
    return false;
}
