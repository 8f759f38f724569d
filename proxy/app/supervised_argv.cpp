#include "app/supervised_argv.hpp"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace warmslot::app {
namespace {

// "-np" matches "-np" and "-np=4".
bool has_flag(const std::vector<std::string>& argv, std::initializer_list<std::string_view> names) {
    return std::any_of(argv.begin(), argv.end(), [&](const std::string& a) {
        return std::any_of(names.begin(), names.end(), [&](std::string_view n) {
            return a == n || (a.size() > n.size() && a.starts_with(n) && a[n.size()] == '=');
        });
    });
}

}  // namespace

std::vector<std::string> supervised_argv(const config::backend& b) {
    std::vector<std::string> argv = b.command;
    argv.insert(argv.end(), {"--host", "127.0.0.1", "--port", std::to_string(b.port)});
    if (!b.slot_save_path.empty()) argv.insert(argv.end(), {"--slot-save-path", b.slot_save_path});
    if (!has_flag(argv, {"--metrics"})) argv.push_back("--metrics");
    // Explicit slots keep slot contents stable (llama-server's defaults move idle slots into its
    // RAM cache and clear them, which defeats routing and slot files).
    if (!has_flag(argv, {"-np", "--parallel"})) argv.insert(argv.end(), {"-np", "4"});
    return argv;
}

}  // namespace warmslot::app
