// POSIX implementation of service.hpp: systemd runs warmslot there (deploy/systemd).
#include <cstdio>

#include "app/service.hpp"

namespace warmslot::app {

int service_command(const std::vector<std::string>&) {
    std::fputs(
        "warmslot: `service` is for Windows; on Linux use the systemd unit in "
        "deploy/systemd\n",
        stderr);
    return 2;
}

}  // namespace warmslot::app
