// warmslot: a caching reverse proxy for llama-server.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "app/app.hpp"
#include "app/process.hpp"
#include "app/service.hpp"
#include "app/status_command.hpp"
#include "app/warm_command.hpp"
#include "config/config.hpp"

namespace {

int usage(int code) {
    std::fputs(
        "usage: warmslot --config FILE\n"
        "       warmslot check-config FILE\n"
        "       warmslot warm --model M --system FILE [--doc FILE ...]\n"
        "                     [--url http://127.0.0.1:8080] [--api-key-env VAR]\n"
        "       warmslot status [--url http://127.0.0.1:8080] [--api-key-env VAR]\n"
        "                       [--requests N] [--json]\n"
        "       warmslot service install|uninstall|start|stop   (Windows)\n"
        "       warmslot --version\n",
        code == 0 ? stdout : stderr);
    return code;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "--version") {
            std::puts("warmslot " WARMSLOT_VERSION);
            return 0;
        }
        if (cmd == "--help" || cmd == "-h") return usage(0);
        if (cmd == "service") return warmslot::app::service_command({argv + 2, argv + argc});
        if (cmd == "warm") return warmslot::app::warm_command({argv + 2, argv + argc});
        if (cmd == "status") return warmslot::app::status_command({argv + 2, argv + argc});
        // How supervised backends are started (app/process.hpp); not for interactive use.
        if (cmd == "exec-child") return warmslot::app::exec_child({argv + 2, argv + argc});
        if (argc == 3 && cmd == "check-config") {
            const auto cfg = warmslot::config::load_file(argv[2]);
            std::printf("%s: ok (%zu backends)\n", argv[2], cfg.backends.size());
            for (const auto& line : warmslot::config::describe_keys(cfg))
                std::printf("  %s\n", line.c_str());
            return 0;
        }
        if (argc == 3 && cmd == "--config") {
            auto cfg = warmslot::config::load_file(argv[2]);
            return warmslot::app::run(argv[2], std::move(cfg));
        }
        return usage(2);
    } catch (const warmslot::config::config_error& e) {
        std::fprintf(stderr, "warmslot: config error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warmslot: %s\n", e.what());
        return 1;
    }
}
