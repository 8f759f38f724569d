#include "status/table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "util/escape.hpp"

namespace warmslot::status {
namespace {

using nlohmann::json;
using row = std::vector<std::string>;

// A field as text: strings as they are, numbers without trailing zeros, null and absent as "-".
std::string text(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key)) return "-";
    const auto& v = j[key];
    // Client text (paths, labels, previews): never a control sequence on the terminal.
    if (v.is_string())
        return v.get<std::string>().empty() ? "-" : util::escape_controls(v.get<std::string>());
    if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
    if (v.is_number_integer()) return std::to_string(v.get<long long>());
    if (v.is_number()) return fmt::format("{:.1f}", v.get<double>());
    return "-";
}

double number(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

const json& list(const json& j, const char* key) {
    static const json empty = json::array();
    return j.is_object() && j.contains(key) && j[key].is_array() ? j[key] : empty;
}

// Display width of UTF-8 text: one column per code point.
std::size_t width(const std::string& s) {
    return static_cast<std::size_t>(std::count_if(
        s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string table(const std::vector<row>& rows) {
    std::vector<std::size_t> widths;
    for (const auto& r : rows) {
        widths.resize(std::max(widths.size(), r.size()), 0);
        for (std::size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], width(r[c]));
    }
    std::string out;
    for (const auto& r : rows) {
        std::string line;
        for (std::size_t c = 0; c < r.size(); ++c) {
            line += r[c];
            if (c + 1 < r.size()) line.append(widths[c] - width(r[c]) + 2, ' ');
        }
        out += line + "\n";
    }
    return out;
}

std::string backends(const json& s) {
    std::vector<row> rows{{"BACKEND", "HEALTH", "ROUTING", "SLOTS", "IN FLIGHT", "MODEL"}};
    std::string notes;
    for (const auto& b : list(s, "backends")) {
        const bool routed = b.value("routing", false);
        // A model not loaded (a router's, or a server asleep) is healthy: a request loads it.
        const char* unloaded = b.contains("router") ? "unloaded" : "asleep";
        const char* health = !b.value("healthy", false) ? "down"
                             : b.value("asleep", false) ? unloaded
                                                        : "ok";
        rows.push_back({text(b, "name"), health, routed ? "on" : "passed through",
                        text(b, "total_slots"), text(b, "in_flight"), text(b, "model")});
        if (!routed)
            notes += fmt::format("  {}: {}\n", text(b, "name"), text(b, "pass_through_reason"));
    }
    return table(rows) + notes;
}

// What a slot does now ("now" in the status): "priming 9216/24077 4s", "-" when nothing.
std::string now_text(const json& sl) {
    if (!sl.contains("now") || !sl["now"].is_object()) return "-";
    const auto& n = sl["now"];
    std::string out = text(n, "doing");
    const bool done = n.contains("done") && n["done"].is_number();
    const bool total = n.contains("total") && n["total"].is_number();
    if (done && total) {
        out +=
            fmt::format(" {}/{}", n["done"].get<std::uint64_t>(), n["total"].get<std::uint64_t>());
    } else if (done) {
        out += fmt::format(" {}", n["done"].get<std::uint64_t>());
    } else if (total) {
        out += fmt::format(" {}", n["total"].get<std::uint64_t>());
    }
    if (n.contains("seconds") && n["seconds"].is_number())
        out += fmt::format(" {:.0f}s", n["seconds"].get<double>());
    return out;
}

std::string slots(const json& s) {
    std::vector<row> rows{{"SLOT", "STATE", "TOKENS", "LAST USE", "NOW", "HOLDS"}};
    for (const auto& b : list(s, "backends")) {
        for (const auto& sl : list(b, "slots")) {
            const auto& ago =
                sl.contains("last_use_seconds_ago") ? sl["last_use_seconds_ago"] : json();
            std::string holds =
                sl.contains("preview") && sl["preview"].is_string()
                    ? "\"" + util::escape_controls(sl["preview"].get<std::string>()) + "\""
                    : "-";
            if (sl.value("label", false)) holds = "label " + holds;
            if (sl.value("scratch", false)) holds += " (scratch)";
            rows.push_back({text(b, "name") + "/" + text(sl, "id"), text(sl, "state"),
                            text(sl, "tokens"),
                            ago.is_number() ? human_ago(ago.get<double>()) + " ago" : "-",
                            now_text(sl), holds});
        }
    }
    return table(rows);
}

std::string disk(const json& s, double now_s) {
    if (!s.contains("disk") || !s["disk"].is_object()) return "";
    const auto& d = s["disk"];
    std::string out =
        fmt::format("disk tier: {} restores, {} failed, {} snapshots on the request path\n",
                    text(d, "restores"), text(d, "restore_failures"), text(d, "snapshots"));
    for (const auto& dir : list(d, "dirs")) {
        out +=
            fmt::format("{}: {} of {}\n", text(dir, "dir"), human_bytes(number(dir, "used_bytes")),
                        human_bytes(number(dir, "budget_bytes")));
        std::vector<row> rows{{"FILE", "TOKENS", "SIZE", "VALUE", "RESTORES", "LAST USE"}};
        for (const auto& f : list(dir, "files")) {
            rows.push_back({text(f, "file"), text(f, "tokens"), human_bytes(number(f, "bytes")),
                            fmt::format("{:.1f}s", number(f, "value_seconds")), text(f, "hits"),
                            human_ago(now_s - number(f, "last_used")) + " ago"});
        }
        if (rows.size() > 1) out += table(rows);
    }
    return out;
}

std::string requests(const json& s, std::size_t n) {
    std::vector<row> rows{
        {"ID", "REQUEST", "STATUS", "SLOT", "ROUTE", "DISK", "CACHED", "PROCESSED", "MS"}};
    for (const auto& r : list(s, "requests")) {
        if (rows.size() > n) break;
        const std::string slot = r.contains("slot") && r["slot"].is_number()
                                     ? text(r, "backend") + "/" + text(r, "slot")
                                     : text(r, "backend");
        rows.push_back({text(r, "id"), text(r, "method") + " " + text(r, "path"), text(r, "status"),
                        slot, text(r, "route"), text(r, "disk"), text(r, "cached"),
                        text(r, "processed"), fmt::format("{:.0f}", number(r, "ms"))});
    }
    return table(rows);
}

}  // namespace

std::string human_bytes(double bytes) {
    static constexpr const char* units[] = {"B", "kB", "MB", "GB", "TB"};
    std::size_t u = 0;
    while (bytes >= 1000 && u + 1 < std::size(units)) {
        bytes /= 1000;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string human_ago(double seconds) {
    seconds = std::max(0.0, seconds);
    if (seconds < 120) return fmt::format("{:.0f}s", seconds);
    if (seconds < 7200) return fmt::format("{:.0f}m", seconds / 60);
    if (seconds < 172800) return fmt::format("{:.0f}h", seconds / 3600);
    return fmt::format("{:.0f}d", seconds / 86400);
}

// Swap groups: who holds each group's places, and what swaps cost so far ("" when none).
std::string swap_groups(const json& s) {
    const json& swaps = s.contains("swaps") ? s["swaps"] : json::object();
    const auto& groups = list(swaps, "groups");
    if (groups.empty()) return "";
    std::vector<row> rows{{"SWAP GROUP", "PLACES", "MEMBERS"}};
    for (const auto& g : groups) {
        std::string members;
        for (const auto& m : list(g, "members")) {
            std::string notes = text(m, "state");
            if (m.value("home", false)) notes += ", home";
            if (number(m, "waiting") > 0) notes += ", " + text(m, "waiting") + " waiting";
            members +=
                fmt::format("{}{} ({})", members.empty() ? "" : ", ", text(m, "backend"), notes);
        }
        // With `allow`: the sets that may run together, e.g. "a+e | b+e".
        std::string places = text(g, "max_running");
        if (!list(g, "allow").empty()) places.clear();
        for (const auto& set : list(g, "allow")) {
            std::string names;
            for (const auto& n : set) {
                if (n.is_string()) names += (names.empty() ? "" : "+") + n.get<std::string>();
            }
            places += (places.empty() ? "" : " | ") + names;
        }
        rows.push_back({text(g, "name"), places, members});
    }
    const json& t = swaps.contains("totals") ? swaps["totals"] : json::object();
    return table(rows) +
           fmt::format(
               "swaps: {} (drain {:.1f} s, save {:.1f} s, stop {:.1f} s, start {:.1f} s, "
               "restore {:.1f} s); failed starts: {}\n\n",
               text(t, "swaps"), number(t, "drain_seconds"), number(t, "save_seconds"),
               number(t, "stop_seconds"), number(t, "start_seconds"), number(t, "restore_seconds"),
               text(t, "failed_starts"));
}

std::string format_status(const json& s, std::size_t n) {
    const json& t = s.contains("totals") ? s["totals"] : json::object();
    std::string out = backends(s) + "\n" + swap_groups(s) + slots(s) + "\n" +
                      disk(s, number(s, "now") / 1000) + "\n";
    out +=
        fmt::format("prompt tokens: {} processed, {} reused; about {:.1f} prefill seconds saved\n",
                    text(t, "prompt_tokens_processed"), text(t, "prompt_tokens_reused"),
                    number(t, "prefill_seconds_saved"));
    if (t.contains("requests_by_route") && t["requests_by_route"].is_object()) {
        std::string routes;
        for (const auto& [route, count] : t["requests_by_route"].items()) {
            routes += fmt::format("{}{} {}", routes.empty() ? "" : ", ", route, count.dump());
        }
        out += "requests by route: " + routes + "\n";
    }
    if (n > 0) out += "\n" + requests(s, n);
    return out;
}

}  // namespace warmslot::status
