#include "app/warm_command.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "api/admin.hpp"
#include "app/client.hpp"

namespace warmslot::app {
namespace {

// Warming a long document on a slow model means prefilling it: allow an hour.
constexpr std::chrono::seconds warm_timeout{3600};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

int warm_command(const std::vector<std::string>& args) {
    auto parsed = api::parse_warm_args(args);
    if (auto* problem = std::get_if<std::string>(&parsed)) {
        std::fprintf(stderr,
                     "warmslot warm: %s\nusage: warmslot warm --model M --system FILE "
                     "[--doc FILE ...] [--url http://127.0.0.1:8080] [--api-key-env VAR]\n",
                     problem->c_str());
        return 2;
    }
    const auto& a = std::get<api::warm_args>(parsed);
    try {
        const auto target = client_target_of(a.url, a.api_key_env);
        api::warm_request w;
        w.model = a.model;
        if (!a.system_file.empty()) w.system = read_file(a.system_file);
        for (const auto& f : a.doc_files) w.documents.push_back(read_file(f));
        nlohmann::json body = {
            {"model", w.model}, {"system", w.system}, {"documents", w.documents}};
        const auto r = client_call(target, true, "/admin/warm", body.dump(), warm_timeout);
        if (r.status != 200) {
            std::fprintf(stderr, "warmslot warm: %u: %s\n", r.status, error_message(r).c_str());
            return 1;
        }
        const auto report = nlohmann::json::parse(r.body, nullptr, false);
        std::printf("%s\n", report.is_discarded() ? r.body.c_str() : report.dump(2).c_str());
        const bool on_disk =
            report.is_object() &&
            (report.value("saved", false) || report.value("reason", "") == "already on disk");
        return on_disk ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warmslot warm: %s\n", e.what());
        return 1;
    }
}

}  // namespace warmslot::app
