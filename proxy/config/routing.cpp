// routing: how requests are placed on backends and slots.
#include "config/reader.hpp"

namespace warmslot::config::detail {

routing_settings reader::read_routing(const entry& e) const {
    routing_settings out;
    read_map(e, {{"enabled", [&](const entry& v) { out.enabled = read_bool(v); }},
                 {"short_request_tokens",
                  [&](const entry& v) { out.short_request_tokens = read_count(v, 0, 10'000'000); }},
                 {"long_segment_tokens",
                  [&](const entry& v) { out.long_segment_tokens = read_count(v, 1, 10'000'000); }},
                 {"scratch_slot", [&](const entry& v) { out.scratch_slot = read_bool(v); }},
                 {"scratch_min_slots",
                  [&](const entry& v) { out.scratch_min_slots = read_count(v, 2, 4096); }},
                 {"max_wait", [&](const entry& v) { out.max_wait = read_duration(v); }},
                 {"reconcile_interval",
                  [&](const entry& v) { out.reconcile_interval = read_duration(v); }}});
    return out;
}

}  // namespace warmslot::config::detail
