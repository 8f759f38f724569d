// What warmslot shows of itself: its log (log) and its dashboard page (dashboard).
#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "config/reader.hpp"

namespace warmslot::config::detail {

log_settings reader::read_log(const entry& e) const {
    static constexpr std::array<std::string_view, 6> levels{"trace", "debug", "info",
                                                            "warn",  "error", "off"};
    log_settings out;
    read_map(e, {{"level",
                  [&](const entry& v) {
                      out.level = read_scalar(v, "a log level");
                      if (std::find(levels.begin(), levels.end(), out.level) == levels.end())
                          fail(v.line, v.path,
                               "unknown level \"" + out.level +
                                   "\"; expected trace, debug, info, warn, error or off");
                  }},
                 {"access", [&](const entry& v) { out.access = read_bool(v); }}});
    return out;
}

dashboard_settings reader::read_dashboard(const entry& e) const {
    dashboard_settings out;
    read_map(e, {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
                 {"previews", [&](const entry& v) { out.previews = read_bool(v); }}});
    return out;
}

}  // namespace warmslot::config::detail
