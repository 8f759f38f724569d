// Which request headers a client may pass on to llama-server. Pure.
#pragma once

#include <string_view>

namespace warmslot::api {

// False for hop-by-hop headers, headers warmslot sets itself (Host, Content-Length), the
// client's credentials for warmslot (Authorization, X-Api-Key), and X-Conversation-Id, which
// makes llama-server keep generating after the client has gone.
bool forward_request_header(std::string_view name) noexcept;

// False for hop-by-hop response headers, llama-server's CORS headers (Access-Control-*: warmslot
// answers CORS itself) and framing headers, which warmslot's own writer sets.
bool forward_response_header(std::string_view name) noexcept;

}  // namespace warmslot::api
