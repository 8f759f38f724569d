#include "app/status_command.hpp"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "app/client.hpp"
#include "status/table.hpp"

namespace warmslot::app {
namespace {

constexpr std::chrono::seconds status_timeout{30};

struct status_args {
    std::string url = "http://127.0.0.1:8080";
    std::string api_key_env;
    std::size_t requests = 20;
    bool json = false;
};

std::optional<std::string> parse(const std::vector<std::string>& args, status_args& a) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& flag = args[i];
        if (flag == "--json") {
            a.json = true;
            continue;
        }
        if (i + 1 >= args.size()) return flag + " needs a value";
        const auto& value = args[++i];
        if (flag == "--url") {
            a.url = value;
        } else if (flag == "--api-key-env") {
            a.api_key_env = value;
        } else if (flag == "--requests") {
            try {
                std::size_t used = 0;
                const auto n = std::stoul(value, &used);
                if (used != value.size() || n > 500) throw std::out_of_range(value);
                a.requests = n;
            } catch (const std::exception&) {
                return "--requests takes a number from 0 to 500";
            }
        } else {
            return "unknown option " + flag;
        }
    }
    return std::nullopt;
}

}  // namespace

int status_command(const std::vector<std::string>& args) {
    status_args a;
    if (auto problem = parse(args, a)) {
        std::fprintf(stderr,
                     "warmslot status: %s\nusage: warmslot status [--url http://127.0.0.1:8080] "
                     "[--api-key-env VAR] [--requests N] [--json]\n",
                     problem->c_str());
        return 2;
    }
    try {
        const auto target = client_target_of(a.url, a.api_key_env);
        const auto r = client_call(target, false, "/warmslot/status", "", status_timeout);
        if (r.status != 200) {
            std::fprintf(stderr, "warmslot status: %u: %s\n", r.status, error_message(r).c_str());
            return 1;
        }
        const auto s = nlohmann::json::parse(r.body, nullptr, false);
        if (!s.is_object()) throw std::runtime_error("the answer is not a JSON object");
        if (a.json) {
            std::printf("%s\n", s.dump(2).c_str());
        } else {
            std::printf("warmslot at %s\n\n%s", a.url.c_str(),
                        status::format_status(s, a.requests).c_str());
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warmslot status: %s\n", e.what());
        return 1;
    }
}

}  // namespace warmslot::app
