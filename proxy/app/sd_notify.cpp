#include "app/sd_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace warmslot::app::sd_notify {
namespace {

std::error_code last_error() { return {errno, std::generic_category()}; }

// One line: a newline would start a new assignment.
std::string status_line(std::string_view status) {
    std::string out = "STATUS=";
    for (const char c : status) out += (c == '\n' || c == '\r') ? ' ' : c;
    return out;
}

std::string with_status(std::string state, std::string_view status) {
    if (!status.empty()) state += "\n" + status_line(status);
    return state;
}

}  // namespace

result notify(std::string_view state) {
    const char* target = std::getenv("NOTIFY_SOCKET");
    if (target == nullptr || target[0] == '\0') return {};
    const std::string_view name(target);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if ((name.front() != '/' && name.front() != '@') || name.size() >= sizeof addr.sun_path)
        return {false, std::make_error_code(std::errc::address_family_not_supported)};
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name.front() == '@') addr.sun_path[0] = '\0';  // abstract namespace
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());

    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return {false, last_error()};
    ssize_t n = 0;
    do {
        n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&addr), length);
    } while (n < 0 && errno == EINTR);
    const result out = n < 0 ? result{false, last_error()} : result{true, {}};
    ::close(fd);
    return out;
}

result ready(std::string_view status) { return notify(with_status("READY=1", status)); }

result reloading(std::string_view status) {
    return notify(
        with_status("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(monotonic_usec()), status));
}

result stopping(std::string_view status) { return notify(with_status("STOPPING=1", status)); }

result status(std::string_view text) { return notify(status_line(text)); }

std::uint64_t monotonic_usec() {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000 +
           static_cast<std::uint64_t>(now.tv_nsec) / 1'000;
}

}  // namespace warmslot::app::sd_notify
