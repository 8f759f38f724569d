#include "app/client.hpp"

#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "config/address.hpp"
#include "net/beast.hpp"
#include "net/timed_stream.hpp"

namespace warmslot::app {
namespace {

awaitable<client_response> call(client_target t, bool post, std::string target, std::string body,
                                std::chrono::seconds timeout) {
    auto ex = co_await net::this_coro::executor;
    tcp::resolver resolver(ex);
    timed_stream stream(ex);
    stream.expires_after(timeout);
    const auto endpoints =
        co_await resolver.async_resolve(t.host, std::to_string(t.port), net::use_awaitable);
    co_await stream.async_connect_any(endpoints, net::use_awaitable);
    http::request<http::string_body> req{post ? http::verb::post : http::verb::get, target, 11};
    req.set(http::field::host, t.host + ":" + std::to_string(t.port));
    if (post) req.set(http::field::content_type, "application/json");
    if (!t.key.empty()) req.set(http::field::authorization, "Bearer " + t.key);
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, net::use_awaitable);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    co_await http::async_read(stream, buffer, res, net::use_awaitable);
    co_return client_response{res.result_int(), std::move(res.body())};
}

}  // namespace

client_target client_target_of(const std::string& url, const std::string& api_key_env) {
    config::backend parsed;
    if (auto problem = config::detail::parse_backend_url(url, parsed)) {
        throw std::runtime_error("--url " + url + ": " + *problem);
    }
    client_target t{parsed.host, parsed.port, ""};
    if (api_key_env.empty()) {
        // The service installers write the key as WARMSLOT_API_KEY: used when it is set.
        const char* v = std::getenv("WARMSLOT_API_KEY");
        if (v && *v) t.key = v;
    } else {
        const char* v = std::getenv(api_key_env.c_str());
        if (!v || !*v)
            throw std::runtime_error("environment variable " + api_key_env + " is not set");
        t.key = v;
    }
    return t;
}

client_response client_call(const client_target& t, bool post, std::string target, std::string body,
                            std::chrono::seconds timeout) {
    net::io_context io;
    auto result = net::co_spawn(io, call(t, post, std::move(target), std::move(body), timeout),
                                net::use_future);
    io.run();
    try {
        return result.get();
    } catch (const boost::system::system_error& e) {  // its what() names Asio's source lines
        throw std::runtime_error(t.host + ":" + std::to_string(t.port) + ": " + e.code().message());
    }
}

std::string error_message(const client_response& r) {
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
        return j["error"]["message"].get<std::string>();
    }
    return r.body.substr(0, 500);
}

}  // namespace warmslot::app
