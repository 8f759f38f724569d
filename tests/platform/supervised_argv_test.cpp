// The flags warmslot adds to a supervised backend's command.
#include "app/supervised_argv.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using argv = std::vector<std::string>;

warmslot::config::backend make(argv command, std::string slots = "/var/lib/warmslot/slots/b") {
    warmslot::config::backend b;
    b.name = "b";
    b.command = std::move(command);
    b.port = 41234;
    b.slot_save_path = std::move(slots);
    return b;
}

}  // namespace

TEST_CASE("supervised argv: the user's command first, then what warmslot needs") {
    struct row {
        const char* what;
        warmslot::config::backend b;
        argv expected;
    };
    const argv base = {"--host", "127.0.0.1", "--port", "41234"};
    const std::vector<row> rows = {
        {"bare command",
         make({"llama-server", "-m", "m.gguf"}),
         {"llama-server", "-m", "m.gguf", "--host", "127.0.0.1", "--port", "41234",
          "--slot-save-path", "/var/lib/warmslot/slots/b", "--metrics", "-np", "4"}},
        {"slots and metrics given",
         make({"llama-server", "-m", "m.gguf", "-np", "2", "--metrics"}),
         {"llama-server", "-m", "m.gguf", "-np", "2", "--metrics", "--host", "127.0.0.1", "--port",
          "41234", "--slot-save-path", "/var/lib/warmslot/slots/b"}},
        {"--parallel=3 counts as -np",
         make({"llama-server", "--parallel=3"}),
         {"llama-server", "--parallel=3", "--host", "127.0.0.1", "--port", "41234",
          "--slot-save-path", "/var/lib/warmslot/slots/b", "--metrics"}},
        {"no slot directory: no --slot-save-path",
         make({"llama-server"}, ""),
         {"llama-server", "--host", "127.0.0.1", "--port", "41234", "--metrics", "-np", "4"}},
        {"-npx is not -np",
         make({"llama-server", "-npx"}, ""),
         {"llama-server", "-npx", "--host", "127.0.0.1", "--port", "41234", "--metrics", "-np", "4"}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(warmslot::app::supervised_argv(r.b) == r.expected);
    }
}
