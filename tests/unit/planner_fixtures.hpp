// Builders shared by the planner tests. Fingerprints are built by hand: a segment list such as
// {{"sys", 200}, {"docA", 20000}} becomes chained levels whose hash covers the names so far, so
// two lists share exactly their common leading segments. Backends use 1 token per byte and 1000
// prefill tokens/s, so 1000 bytes = 1 second of prefill.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "routing/planner.hpp"

namespace planner_fixtures {

namespace rt = warmslot::routing;
using rt::route;
using std::chrono::seconds;

using segments = std::vector<std::pair<std::string, std::uint64_t>>;

inline const rt::clock::time_point now = rt::clock::time_point{} + std::chrono::hours(100);

inline std::vector<rt::prefix_level> chain(const segments& segs) {
    std::vector<rt::prefix_level> out;
    std::uint64_t hash = 14695981039346656037ull;  // FNV-1a over the names so far
    std::uint64_t bytes = 0;
    for (const auto& [name, size] : segs) {
        for (const char ch : name + "/") {
            hash = (hash ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
        }
        bytes += size;
        out.push_back({hash, bytes});
    }
    return out;
}

inline rt::fingerprint request(const segments& segs, std::size_t stable_levels) {
    rt::fingerprint fp;
    fp.levels = chain(segs);
    fp.total_bytes = fp.levels.empty() ? 0 : fp.levels.back().bytes;
    for (const auto& seg : segs)
        fp.longest_segment_bytes = std::max(fp.longest_segment_bytes, seg.second);
    fp.stable_levels = stable_levels;
    return fp;
}

inline rt::slot_view idle(int id, const segments& held = {}) {
    rt::slot_view s;
    s.id = id;
    s.held = chain(held);
    s.held_tokens = s.held.empty() ? 0 : s.held.back().bytes;
    return s;
}

inline rt::slot_view busy(int id, const segments& held = {}, double seconds_left = 1) {
    rt::slot_view s = idle(id, held);
    s.busy = true;
    s.busy_until = now + std::chrono::duration_cast<rt::clock::duration>(
                             std::chrono::duration<double>(seconds_left));
    return s;
}

inline rt::slot_view valued(int id, std::uint64_t tokens, double hits, int age_seconds) {
    rt::slot_view s = idle(id, {{"old" + std::to_string(id), tokens}});
    s.recent_hits = hits;
    s.last_use = now - seconds(age_seconds);
    return s;
}

inline rt::slot_view marked_scratch(rt::slot_view s) {
    s.scratch = true;
    return s;
}

inline rt::backend_view backend(std::vector<rt::slot_view> slots, std::size_t in_flight = 0,
                                std::vector<std::string> models = {}) {
    rt::backend_view b;
    b.name = "b";
    b.models = std::move(models);
    b.tokens_per_byte = 1.0;
    b.prefill_tokens_per_second = 1000;
    b.in_flight = in_flight;
    b.slots = std::move(slots);
    return b;
}

inline rt::backend_view unhealthy(rt::backend_view b) {
    b.healthy = false;
    return b;
}

inline rt::backend_view no_pinning(rt::backend_view b) {
    b.pinning = false;
    return b;
}

// Segments used across the tables.
inline const std::pair<std::string, std::uint64_t> sys{"sys", 200}, doc_a{"docA", 20000},
    doc_a2{"docA-edited", 20000}, doc_b{"docB", 20000}, q1{"q1", 100}, q2{"q2", 100}, a1{"a1", 300},
    a1x{"a1-rerendered", 300};

// A long request: a document and a question; stable = sys + document.
inline const rt::fingerprint doc_a_q2 = request({sys, doc_a, q2}, 2);
// A short one-off: 300 bytes, nothing long.
inline const rt::fingerprint one_off = request({{"sysX", 200}, {"hello", 100}}, 1);

struct expect {
    int backend;
    std::optional<int> slot;
    route why;
    std::size_t matched = 0;
    std::uint64_t cached = 0;
    std::size_t diverged_at = 0;
    bool unknown_model = false;
};

struct scenario {
    std::string name;
    std::vector<rt::backend_view> backends;
    std::optional<rt::fingerprint> fp;
    expect want;
    std::string model = "";
    rt::planner_settings settings = {};
    std::vector<std::uint64_t> evicted = {};
};

inline rt::plan run(const scenario& s) {
    rt::plan_input in;
    in.request = s.fp ? &*s.fp : nullptr;
    in.model = s.model;
    in.backends = &s.backends;
    in.settings = s.settings;
    in.now = now;
    in.recently_evicted = &s.evicted;
    return rt::choose(in);
}

inline void check(const std::vector<scenario>& table) {
    for (const auto& s : table) {
        CAPTURE(s.name);
        const rt::plan p = run(s);
        CHECK(p.backend == s.want.backend);
        CHECK(p.slot == s.want.slot);
        CHECK(rt::name(p.why) == rt::name(s.want.why));
        CHECK(p.matched_levels == s.want.matched);
        CHECK(p.expected_cached_tokens == s.want.cached);
        CHECK(p.diverged_at == s.want.diverged_at);
        CHECK(p.unknown_model == s.want.unknown_model);
    }
}

inline rt::planner_settings with_max_wait(double seconds_) {
    rt::planner_settings s;
    s.max_wait_seconds = seconds_;
    return s;
}

inline rt::planner_settings without_scratch() {
    rt::planner_settings s;
    s.scratch_slot = false;
    return s;
}

}  // namespace planner_fixtures
