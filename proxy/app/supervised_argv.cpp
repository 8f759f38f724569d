#include "app/supervised_argv.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <random>
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

// Whole names that pass.
constexpr std::string_view allowed_names[] = {
    // POSIX: finding programs and libraries, home, locale, time zone, temporary files
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    // Windows: what its C runtime, Winsock and GPU drivers expect to find
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
    "PROGRAMFILES",
    "PROGRAMFILES(X86)",
    "PROGRAMW6432",
    "COMMONPROGRAMFILES",
    "NUMBER_OF_PROCESSORS",
    "PROCESSOR_ARCHITECTURE",
    "PROCESSOR_IDENTIFIER",
    "OS",
    // GPU selection understood by several runtimes
    "GPU_DEVICE_ORDINAL",
    "ONEAPI_DEVICE_SELECTOR",
    "VULKAN_SDK",
};

// Prefixes of names that pass: locale categories, GPU runtimes (NVIDIA, AMD, Intel, Vulkan,
// Metal), the math and threading libraries llama.cpp links, llama.cpp itself.
constexpr std::string_view allowed_prefixes[] = {
    "LC_",  "CUDA_", "NVIDIA_", "HIP_",  "ROCR_",  "ROCM_", "HSA_",      "AMD_", "SYCL_",
    "ZES_", "VK_",   "MTL_",    "GGML_", "LLAMA_", "OMP_",  "OPENBLAS_", "MKL_", "KMP_",
};

bool same_name(std::string_view a, std::string_view b, bool ignore_case) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const auto x = static_cast<unsigned char>(a[i]);
        const auto y = static_cast<unsigned char>(b[i]);
        if (ignore_case ? std::toupper(x) != std::toupper(y) : x != y) return false;
    }
    return true;
}

}  // namespace

bool passes_to_backend(std::string_view name, bool windows) {
    if (name.empty()) return false;
    for (const std::string_view n : allowed_names) {
        if (same_name(name, n, windows)) return true;
    }
    for (const std::string_view p : allowed_prefixes) {
        if (name.size() > p.size() && same_name(name.substr(0, p.size()), p, windows)) return true;
    }
    return false;
}

std::vector<std::string> supervised_env(const config::backend& b,
                                        const std::vector<std::string>& parent, bool windows,
                                        std::string_view key) {
    std::vector<std::string> out;
    const auto set_by_config = [&](std::string_view name) {
        return std::any_of(b.env.begin(), b.env.end(),
                           [&](const auto& kv) { return same_name(kv.first, name, windows); });
    };
    // The key warmslot gave the process is the only one it gets (getenv finds the first entry).
    const auto keyed = [&](std::string_view name) {
        return !key.empty() && same_name(name, child_key_variable, windows);
    };
    for (const std::string& entry : parent) {
        const auto eq = entry.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        const std::string_view name = std::string_view(entry).substr(0, eq);
        if (passes_to_backend(name, windows) && !set_by_config(name) && !keyed(name))
            out.push_back(entry);
    }
    for (const auto& [name, value] : b.env) {
        if (!keyed(name)) out.push_back(name + "=" + value);
    }
    if (!key.empty()) out.push_back(std::string(child_key_variable) + "=" + std::string(key));
    return out;
}

std::string random_child_key() {
    std::random_device rd;  // the system's CSPRNG (getrandom on Linux, BCryptGenRandom on Windows)
    constexpr char hex[] = "0123456789abcdef";
    std::string key = "warmslot-";
    for (int i = 0; i < 8; ++i) {
        const auto r = rd();
        for (int k = 0; k < 8; ++k) key += hex[(r >> (4 * k)) & 0xFu];
    }
    return key;
}

std::vector<std::string> supervised_argv(const config::backend& b, bool isolated) {
    std::vector<std::string> argv = b.command;
    if (b.host.starts_with('/')) {
        argv.insert(argv.end(), {"--host", b.host});
    } else {
        argv.insert(argv.end(), {"--host", "127.0.0.1", "--port", std::to_string(b.port)});
    }
    if (!b.slot_save_path.empty()) argv.insert(argv.end(), {"--slot-save-path", b.slot_save_path});
    if (!has_flag(argv, {"--metrics"})) argv.push_back("--metrics");
    // Explicit slots keep slot contents stable (llama-server's defaults move idle slots into its
    // RAM cache and clear them, which defeats routing and slot files).
    if (!has_flag(argv, {"-np", "--parallel"})) argv.insert(argv.end(), {"-np", "4"});
    // Tenant isolation: no RAM prompt cache, which would hand one tenant's cached state to
    // another's request (config validation refuses a command that turns it on).
    if (isolated && !has_flag(argv, {"-cram", "--cache-ram"})) {
        argv.insert(argv.end(), {"--cache-ram", "0"});
    }
    return argv;
}

}  // namespace warmslot::app
