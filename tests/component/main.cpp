#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
    // The tests assert on responses and counters, not on log text: keep the output readable.
    spdlog::set_level(spdlog::level::err);
    doctest::Context context(argc, argv);
    return context.run();
}
