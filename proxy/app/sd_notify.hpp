// systemd's notify protocol without libsystemd: one datagram to $NOTIFY_SOCKET per message.
// Used with Type=notify (READY, STOPPING, STATUS) and Type=notify-reload (RELOADING with
// MONOTONIC_USEC). Every function is a no-op when NOTIFY_SOCKET is unset (not run by systemd).
//
// Stateless and thread-safe: each call reads the environment and opens its own socket. Never
// throws; a failure to send is returned so the caller can log it once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace warmslot::app::sd_notify {

struct result {
    bool sent = false;      // a datagram went out
    std::error_code error;  // why not, when NOTIFY_SOCKET was set but sending failed
};

// Sends `state` as given: newline-separated KEY=VALUE assignments. NOTIFY_SOCKET may be a
// filesystem path ("/run/systemd/notify") or an abstract socket name ("@name").
result notify(std::string_view state);

// "READY=1", plus "STATUS=<status>" when status is not empty.
result ready(std::string_view status = {});

// "RELOADING=1" and "MONOTONIC_USEC=<now>", plus STATUS. Send before reloading the config and
// send ready() when the new config is in use (or the old one is kept after an error).
result reloading(std::string_view status = {});

// "STOPPING=1", plus STATUS.
result stopping(std::string_view status = {});

// "STATUS=<text>": one line shown by `systemctl status`.
result status(std::string_view text);

// CLOCK_MONOTONIC in microseconds, the clock systemd expects in MONOTONIC_USEC.
std::uint64_t monotonic_usec();

}  // namespace warmslot::app::sd_notify
