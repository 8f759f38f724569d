// Client text made safe for a terminal or a log line. Pure.
#pragma once

#include <string>
#include <string_view>

namespace warmslot::util {

// `text` with every control character escaped: C0 (U+0000..U+001F, tabs and newlines
// included), DEL, C1 written as UTF-8 (U+0080..U+009F) and any byte that is not part of valid
// UTF-8 (a lone 0x9B is CSI to an 8-bit terminal). C0, DEL and stray bytes become \xNN, C1
// code points \u00NN, a backslash stays as it is. Printable UTF-8 is kept.
std::string escape_controls(std::string_view text);

// Whether escape_controls would change `text` (the fast path: most text needs nothing).
bool has_controls(std::string_view text) noexcept;

}  // namespace warmslot::util
