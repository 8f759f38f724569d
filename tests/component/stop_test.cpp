// app::run() and app::request_stop(), the stop path of a Windows service's stop control: a whole
// warmslot in this process on loopback port 0, its backend a closed port. Every wait has a
// deadline.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "app/app.hpp"
#include "config/config.hpp"

namespace warmslot {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto run_deadline = 20s;  // far above a stop with a 100 ms grace

// A config file in a fresh directory (the file watcher watches it), removed by the destructor.
struct config_file {
    fs::path dir;
    fs::path path;
    config_file() {
        dir = fs::temp_directory_path() /
              ("warmslot-stop-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
        fs::create_directories(dir);
        path = dir / "warmslot.yaml";
        std::ofstream(path) << "listen: 127.0.0.1:0\n"
                               "backends:\n"
                               "  - name: a\n"
                               "    url: http://127.0.0.1:9\n"
                               "timeouts:\n"
                               "  shutdown_grace: 100ms\n"
                               "log:\n"
                               "  level: error\n";
    }
    ~config_file() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

// Runs warmslot on another thread; `ready` counts the on_ready calls.
std::future<int> start(const config_file& file, std::atomic<int>& ready,
                       std::promise<void>* ready_signal = nullptr) {
    app::run_options options;
    options.console = false;
    options.on_ready = [&ready, ready_signal] {
        ++ready;
        if (ready_signal) ready_signal->set_value();
    };
    const std::string path = file.path.string();
    return std::async(std::launch::async,
                      [path, options] { return app::run(path, config::load_file(path), options); });
}

// The run ends within the deadline with exit code 0; otherwise it is stopped and the check fails.
void check_stops(std::future<int>& run) {
    const bool ended = run.wait_for(run_deadline) == std::future_status::ready;
    CHECK(ended);
    if (!ended) app::request_stop();
    CHECK(run.get() == 0);
}

TEST_CASE("a stop requested before run() is ready is remembered and honoured once it is") {
    const config_file file;
    std::atomic<int> ready = 0;
    app::request_stop();  // a service stop control during start-up
    auto run = start(file, ready);
    check_stops(run);
    CHECK(ready == 1);  // it got ready first, then stopped gracefully
}

TEST_CASE("a stop requested while running stops it gracefully") {
    const config_file file;
    std::atomic<int> ready = 0;
    std::promise<void> ready_signal;
    auto ready_future = ready_signal.get_future();
    auto run = start(file, ready, &ready_signal);
    REQUIRE(ready_future.wait_for(run_deadline) == std::future_status::ready);
    app::request_stop();
    check_stops(run);
    CHECK(ready == 1);
}

}  // namespace
}  // namespace warmslot
