// Comparing secrets without leaking their content through timing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace warmslot::util {

// True when `given` equals one of `keys`. Every key is compared in full, in time that depends
// only on the lengths, so neither the matching key nor a matching prefix shows in the timing.
bool matches_any_key(std::string_view given, const std::vector<std::string>& keys) noexcept;

// The index of the key `given` equals, or keys.size() when none; compared as above.
std::size_t matching_key(std::string_view given, const std::vector<std::string>& keys) noexcept;

}  // namespace warmslot::util
