// The http module's loggers and the client address its lines name. Internal to http/.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>

#include "net/timed_stream.hpp"
#include "util/log.hpp"

namespace warmslot::http_server::server_detail {

inline std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("http");
    return logger;
}

inline std::shared_ptr<spdlog::logger> access_log() {
    static auto logger = util::module_logger("access");
    return logger;
}

// The client's address as the access line shows it ("-" when the socket no longer has one).
inline std::string peer_of(timed_stream& stream) {
    error_code ec;
    const auto ep = stream.socket().remote_endpoint(ec);
    if (ec) return "-";
    const auto address = ep.address().to_string();
    return ep.address().is_v6() ? fmt::format("[{}]:{}", address, ep.port())
                                : fmt::format("{}:{}", address, ep.port());
}

}  // namespace warmslot::http_server::server_detail
