// The `swap_groups` list: command backends that share a device and may not all run at once.
#include <algorithm>
#include <string>

#include "config/address.hpp"
#include "config/reader.hpp"

namespace warmslot::config::detail {
namespace {

bool is_group_name(std::string_view name) {
    const auto ok = [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; };
    return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), ok);
}

}  // namespace

std::vector<swap_group> reader::read_swap_groups(const entry& e, const config& c,
                                                 const entry& top) const {
    if (e.node.IsNull()) return {};
    if (!e.node.IsSequence())
        fail(e.line, e.path, "expected a list of groups, found " + std::string(kind_of(e.node)));
    std::vector<swap_group> out;
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry item{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        swap_group g = read_swap_group(item);
        for (std::size_t j = 0; j < out.size(); ++j) {
            if (out[j].name == g.name)
                fail(item.line, item.path + ".name",
                     "duplicate group name \"" + g.name + "\" (also " + item_path(e.path, j) + ")");
            for (const auto& member : g.backends) {
                if (std::find(out[j].backends.begin(), out[j].backends.end(), member) !=
                    out[j].backends.end())
                    fail(item.line, item.path + ".backends",
                         "backend \"" + member + "\" is already in group \"" + out[j].name +
                             "\"; a backend is in one group at most");
            }
        }
        check_swap_group(item, g, c, top);
        out.push_back(std::move(g));
    }
    return out;
}

swap_group reader::read_swap_group(const entry& e) const {
    if (!e.node.IsMap())
        fail(e.line, e.path,
             "expected a map with name and backends, found " + std::string(kind_of(e.node)));
    swap_group g;
    bool have_name = false;
    bool have_max = false;
    int backends_line = 0;
    read_map(
        e, {{"name",
             [&](const entry& v) {
                 g.name = read_scalar(v, "a name");
                 if (!is_group_name(g.name))
                     fail(v.line, v.path, "must be 1 to 64 characters of A-Z a-z 0-9 . _ -");
                 have_name = true;
             }},
            {"backends",
             [&](const entry& v) {
                 if (!v.node.IsSequence())
                     fail(
                         v.line, v.path,
                         "expected a list of backend names, found " + std::string(kind_of(v.node)));
                 for (std::size_t i = 0; i < v.node.size(); ++i) {
                     const entry item{v.node[i], item_path(v.path, i), line_of(v.node[i], v.line)};
                     std::string name = read_scalar(item, "a backend name");
                     if (std::find(g.backends.begin(), g.backends.end(), name) != g.backends.end())
                         fail(item.line, item.path, "\"" + name + "\" is listed twice");
                     g.backends.push_back(std::move(name));
                 }
                 backends_line = v.line;
             }},
            {"max_running",
             [&](const entry& v) {
                 g.max_running = read_count(v, 1, 64);
                 have_max = true;
             }},
            {"min_residency", [&](const entry& v) { g.min_residency = read_duration(v, true); }},
            {"home", [&](const entry& v) { g.home = read_scalar(v, "a backend name"); }},
            {"home_after", [&](const entry& v) { g.home_after = read_duration(v); }},
            {"drain_grace", [&](const entry& v) { g.drain_grace = read_duration(v, true); }},
            {"allow", [&](const entry& v) { read_allow(v, g); }}});
    if (!have_name) fail(e.line, child_path(e.path, "name"), "is required");
    if (backends_line == 0) fail(e.line, child_path(e.path, "backends"), "is required");
    if (g.backends.size() < 2)
        fail(backends_line, child_path(e.path, "backends"),
             "list at least two backends; a group of one changes nothing");
    if (!g.allow.empty()) {
        if (have_max)
            fail(line_of(e.node["max_running"], e.line), child_path(e.path, "max_running"),
                 "give max_running or allow, not both (allow says which members run together)");
        check_allow(
            entry{e.node["allow"], child_path(e.path, "allow"), line_of(e.node["allow"], e.line)},
            g);
    } else if (g.max_running >= g.backends.size())
        fail(line_of(e.node["max_running"], e.line), child_path(e.path, "max_running"),
             std::string(have_max ? "" : "defaults to 1, which ") + "must be below the number " +
                 "of backends in the group (" + std::to_string(g.backends.size()) +
                 "), or the group never stops one");
    if (!g.home.empty() &&
        std::find(g.backends.begin(), g.backends.end(), g.home) == g.backends.end())
        fail(line_of(e.node["home"], e.line), child_path(e.path, "home"),
             "\"" + g.home + "\" is not one of this group's backends");
    return g;
}

// `allow`: a list of sets of member names; checked against the members once both are read.
void reader::read_allow(const entry& e, swap_group& g) const {
    if (!e.node.IsSequence() || e.node.size() == 0)
        fail(e.line, e.path,
             "expected a list of sets of backend names, e.g. [[coder, embed], [chat]]");
    for (std::size_t i = 0; i < e.node.size(); ++i) {
        const entry set{e.node[i], item_path(e.path, i), line_of(e.node[i], e.line)};
        if (!set.node.IsSequence() || set.node.size() == 0)
            fail(set.line, set.path,
                 "expected a list of backend names that may run together, found " +
                     std::string(set.node.IsSequence() ? "an empty list" : kind_of(set.node)));
        std::vector<std::string> names;
        for (std::size_t j = 0; j < set.node.size(); ++j) {
            const entry item{set.node[j], item_path(set.path, j), line_of(set.node[j], set.line)};
            std::string name = read_scalar(item, "a backend name");
            if (std::find(names.begin(), names.end(), name) != names.end())
                fail(item.line, item.path, "\"" + name + "\" is listed twice");
            names.push_back(std::move(name));
        }
        g.allow.push_back(std::move(names));
    }
}

void reader::check_allow(const entry& e, swap_group& g) const {
    const auto member = [&](const std::string& name) {
        return std::find(g.backends.begin(), g.backends.end(), name) != g.backends.end();
    };
    std::size_t largest = 0;
    for (std::size_t i = 0; i < g.allow.size(); ++i) {
        const auto& set = g.allow[i];
        const YAML::Node node = e.node[i];
        for (std::size_t j = 0; j < set.size(); ++j) {
            if (!member(set[j]))
                fail(line_of(node[j], e.line), item_path(item_path(e.path, i), j),
                     "\"" + set[j] + "\" is not one of this group's backends");
        }
        if (set.size() == g.backends.size())
            fail(line_of(node, e.line), item_path(e.path, i),
                 "holds every backend of the group, so the group would never stop one");
        largest = std::max(largest, set.size());
    }
    for (const auto& name : g.backends) {
        const bool listed = std::any_of(g.allow.begin(), g.allow.end(), [&](const auto& set) {
            return std::find(set.begin(), set.end(), name) != set.end();
        });
        if (!listed)
            fail(e.line, e.path,
                 "backend \"" + name +
                     "\" is in no set, so it could never run; list it alone as [" + name +
                     "] if it runs by itself");
    }
    g.max_running = largest;
}

// Members are command backends of this file; the group decides when they run, so their own
// `start` would contradict it.
void reader::check_swap_group(const entry& e, const swap_group& g, const config& c,
                              const entry& top) const {
    const YAML::Node list = e.node["backends"];
    for (std::size_t i = 0; i < g.backends.size(); ++i) {
        const std::string path = item_path(child_path(e.path, "backends"), i);
        const int line = line_of(list[i], e.line);
        const auto it = std::find_if(c.backends.begin(), c.backends.end(),
                                     [&](const backend& b) { return b.name == g.backends[i]; });
        if (it == c.backends.end())
            fail(line, path, "no backend is named \"" + g.backends[i] + "\"");
        if (!it->supervised())
            fail(line, path,
                 "\"" + g.backends[i] +
                     "\" has a url; only command backends (ones warmslot starts) can be swapped");
        const auto index = static_cast<std::size_t>(it - c.backends.begin());
        const YAML::Node start = top.node["backends"][index]["start"];
        if (start)
            fail(line_of(start, top.line), item_path("backends", index) + ".start",
                 "a member of swap group \"" + g.name +
                     "\" starts when a request needs it (or as the group's home); remove start");
    }
}

}  // namespace warmslot::config::detail
