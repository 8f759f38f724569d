// What warmslot sends a backend for a client's request: the request line and headers, and the
// body, pinned to a slot or not, as pieces of the client's own bytes. Internal to the service
// module.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "net/beast.hpp"

namespace warmslot::service {

// The body to send, as pieces of the client's body (which lives to the end of the request):
// pinned to `slot` by a field inserted after its opening brace, or rewritten without any id_slot
// the client may have sent (a client's id_slot could name a busy slot, which can hang
// llama-server).
struct outgoing_body {
    std::string_view before;  // the client's body up to its opening brace, or all of it
    std::string field;        // inserted after `before`
    std::string_view after;
    std::string owned;  // a rewritten body, sent instead of the pieces
    std::size_t size() const {
        return owned.empty() ? before.size() + field.size() + after.size() : owned.size();
    }
};

// `parsed`: the client's body as JSON (null: not read as JSON, or the body is sent as it came).
outgoing_body prepared_body(const std::string& body, const nlohmann::json* parsed,
                            std::optional<int> slot, const config::backend& b);

// The request line and headers sent to the backend: the client's end-to-end headers in their
// order, then Host and, when the method or the body calls for it, Content-Length. The bytes
// Beast writes for such a message after prepare_payload, without building one.
std::string upstream_head(const http::request<http::string_body>& in, const config::backend& b,
                          std::size_t body_size);

}  // namespace warmslot::service
