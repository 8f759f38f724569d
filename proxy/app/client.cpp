#include "app/client.hpp"

#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_future.hpp>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "config/address.hpp"
#include "net/beast.hpp"
#include "net/timed_stream.hpp"
#include "sse/parser.hpp"

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

class event_relay final : public sse::event_sink {
  public:
    explicit event_relay(const event_handler& h) : h_(h) {}
    void on_event(std::string_view name, std::string_view data, std::string_view) override {
        h_(name, data);
    }

  private:
    const event_handler& h_;
};

// `live` points at the connection while it is open, for the SIGINT handler to close.
awaitable<stream_response> stream_call(client_target t, std::string target, std::string body,
                                       std::chrono::seconds timeout, event_handler on_event,
                                       timed_stream** live) {
    auto ex = co_await net::this_coro::executor;
    tcp::resolver resolver(ex);
    timed_stream stream(ex);
    *live = &stream;
    struct forget {
        timed_stream** at;
        ~forget() { *at = nullptr; }
    } const unlink{live};
    stream.expires_after(timeout);
    const auto endpoints =
        co_await resolver.async_resolve(t.host, std::to_string(t.port), net::use_awaitable);
    co_await stream.async_connect_any(endpoints, net::use_awaitable);
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, t.host + ":" + std::to_string(t.port));
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    if (!t.key.empty()) req.set(http::field::authorization, "Bearer " + t.key);
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, net::use_awaitable);
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    co_await http::async_read_header(stream, buffer, p, net::use_awaitable);
    stream_response r;
    r.status = p.get().result_int();
    sse::parser events;
    event_relay sink(on_event);
    std::array<char, 16 * 1024> chunk;
    while (!p.is_done()) {
        p.get().body().data = chunk.data();
        p.get().body().size = chunk.size();
        auto [ec, n] = co_await http::async_read_some(stream, buffer, p, nothrow);
        if (ec && ec != http::error::need_buffer) throw boost::system::system_error(ec);
        const std::string_view got(chunk.data(), chunk.size() - p.get().body().size);
        if (r.status == 200) {
            events.feed(got, sink);
        } else {
            r.body.append(got);
        }
    }
    co_return r;
}

}  // namespace

stream_response client_stream(const client_target& t, std::string target, std::string body,
                              std::chrono::seconds timeout, event_handler on_event) {
    net::io_context io;
    timed_stream* live = nullptr;
    bool interrupted = false;
    net::signal_set signals(io, SIGINT);
    signals.async_wait([&](const error_code& ec, int) {
        if (ec) return;
        interrupted = true;
        if (live) live->close();
    });
    std::exception_ptr failure;
    stream_response r;
    net::co_spawn(
        io, stream_call(t, std::move(target), std::move(body), timeout, std::move(on_event), &live),
        [&](std::exception_ptr e, stream_response got) {
            failure = e;
            r = std::move(got);
            signals.cancel();
        });
    io.run();
    if (interrupted) return stream_response{0, "", true};
    if (failure) {
        try {
            std::rethrow_exception(failure);
        } catch (const boost::system::system_error& e) {  // its what() names Asio's source lines
            throw std::runtime_error(t.host + ":" + std::to_string(t.port) + ": " +
                                     e.code().message());
        }
    }
    return r;
}

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
