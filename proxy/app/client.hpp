// The HTTP client of warmslot's own short-lived commands (`warmslot warm`, `warmslot status`):
// one blocking call to a running warmslot. Not for the server: it runs its own io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace warmslot::app {

struct client_target {
    std::string host;
    std::uint16_t port = 0;
    std::string key;  // "" = no Authorization header. Never printed.
};

// From --url and --api-key-env (may be "": then the key is $WARMSLOT_API_KEY when set).
// Throws std::runtime_error with a clear message.
client_target client_target_of(const std::string& url, const std::string& api_key_env);

struct client_response {
    unsigned status = 0;
    std::string body;
};

// GET (post false) or POST with a JSON body. Throws on connection and protocol errors.
client_response client_call(const client_target& t, bool post, std::string target, std::string body,
                            std::chrono::seconds timeout);

// A POST whose answer is a stream of Server-Sent Events (Accept: text/event-stream): `on_event`
// gets each event's name and data as it arrives. An answer other than 200 comes back whole in
// `body`, without events. Ctrl-C (SIGINT) while it runs closes the connection at once and sets
// `interrupted`, so the server sees its client leave. Throws on connection and protocol errors.
struct stream_response {
    unsigned status = 0;
    std::string body;
    bool interrupted = false;
};
using event_handler = std::function<void(std::string_view name, std::string_view data)>;
stream_response client_stream(const client_target& t, std::string target, std::string body,
                              std::chrono::seconds timeout, event_handler on_event);

// The OpenAI-shaped error's message, else the start of the body.
std::string error_message(const client_response& r);

}  // namespace warmslot::app
