#include "sse/writer.hpp"

namespace warmslot::sse {

std::string format_data_event(std::string_view payload) {
    constexpr std::string_view prefix = "data: ";
    std::string out;
    out.reserve(payload.size() + prefix.size() + 2);
    std::size_t pos = 0;
    while (true) {
        const std::size_t eol = payload.find_first_of("\r\n", pos);
        out.append(prefix);
        out.append(payload.substr(pos, eol - pos));
        out.push_back('\n');
        if (eol == std::string_view::npos) break;
        pos = eol + 1;
        if (payload[eol] == '\r' && pos < payload.size() && payload[pos] == '\n') ++pos;
    }
    out.push_back('\n');
    return out;
}

std::string format_named_event(std::string_view name, std::string_view payload) {
    std::string out = "event: ";
    out.append(name).push_back('\n');
    return out + format_data_event(payload);
}

std::string format_comment(std::string_view text) {
    std::string out = ":";
    if (!text.empty()) out.append(" ").append(text);
    return out.append("\n\n");
}

}  // namespace warmslot::sse
