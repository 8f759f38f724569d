#include "app/warm_command.hpp"

#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "api/admin.hpp"
#include "config/address.hpp"
#include "net/beast.hpp"
#include "net/timed_stream.hpp"

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

struct response {
    unsigned status = 0;
    std::string body;
};

awaitable<response> post(std::string host, std::uint16_t port, std::string target, std::string body,
                         std::string key) {
    auto ex = co_await net::this_coro::executor;
    tcp::resolver resolver(ex);
    timed_stream stream(ex);
    stream.expires_after(warm_timeout);
    const auto endpoints =
        co_await resolver.async_resolve(host, std::to_string(port), net::use_awaitable);
    co_await stream.async_connect_any(endpoints, net::use_awaitable);
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, host + ":" + std::to_string(port));
    req.set(http::field::content_type, "application/json");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, net::use_awaitable);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    co_await http::async_read(stream, buffer, res, net::use_awaitable);
    co_return response{res.result_int(), std::move(res.body())};
}

std::string error_message(const response& r) {
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
        return j["error"]["message"].get<std::string>();
    }
    return r.body.substr(0, 500);
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
        config::backend target;
        if (auto problem = config::detail::parse_backend_url(a.url, target)) {
            throw std::runtime_error("--url " + a.url + ": " + *problem);
        }
        std::string key;
        if (!a.api_key_env.empty()) {
            const char* v = std::getenv(a.api_key_env.c_str());
            if (!v || !*v)
                throw std::runtime_error("environment variable " + a.api_key_env + " is not set");
            key = v;
        }
        api::warm_request w;
        w.model = a.model;
        if (!a.system_file.empty()) w.system = read_file(a.system_file);
        for (const auto& f : a.doc_files) w.documents.push_back(read_file(f));
        nlohmann::json body = {
            {"model", w.model}, {"system", w.system}, {"documents", w.documents}};
        net::io_context io;
        auto result = net::co_spawn(
            io, post(target.host, target.port, "/admin/warm", body.dump(), key), net::use_future);
        io.run();
        const auto r = result.get();
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
