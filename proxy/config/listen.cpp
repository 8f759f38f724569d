// How the server meets its clients: the address it listens on (listen), what one request and
// the open connections may take (limits), and how long each step of a request may last, on the
// client's side and the backend's (timeouts).
#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "config/address.hpp"
#include "config/reader.hpp"

namespace warmslot::config::detail {
namespace {

constexpr std::uint64_t kib = 1024;

}  // namespace

listen_address reader::read_listen(const entry& e) const {
    listen_address out;
    if (auto problem = parse_listen(read_scalar(e, "host:port"), out))
        fail(e.line, e.path, *problem);
    return out;
}

limits reader::read_limits(const entry& e) const {
    limits out;
    read_map(
        e, {{"max_header_bytes",
             [&](const entry& v) { out.max_header_bytes = read_size(v, kib, kib * kib); }},
            {"max_header_count",
             [&](const entry& v) { out.max_header_count = read_count(v, 8, 10'000); }},
            {"max_body_bytes",
             [&](const entry& v) { out.max_body_bytes = read_size(v, kib, 4 * kib * kib * kib); }},
            {"max_connections",
             [&](const entry& v) { out.max_connections = read_count(v, 1, 100'000); }},
            {"stalled_reader", [&](const entry& v) { out.stalled_reader = read_duration(v); }}});
    return out;
}

timeouts reader::read_timeouts(const entry& e) const {
    static constexpr std::array<std::pair<std::string_view, millis timeouts::*>, 8> names{{
        {"header_read", &timeouts::header_read},
        {"body_read", &timeouts::body_read},
        {"connect", &timeouts::connect},
        {"upstream_response", &timeouts::upstream_response},
        {"stream_idle", &timeouts::stream_idle},
        {"stream_keepalive", &timeouts::stream_keepalive},
        {"client_idle", &timeouts::client_idle},
        {"shutdown_grace", &timeouts::shutdown_grace},
    }};
    timeouts out;
    std::vector<field> fields;
    for (const auto& name : names) {
        const auto member = name.second;
        fields.push_back(
            {name.first, [&out, member, this](const entry& v) { out.*member = read_duration(v); }});
    }
    read_map(e, fields);
    return out;
}

}  // namespace warmslot::config::detail
