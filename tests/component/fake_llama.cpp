// The fake llama-server's sockets: accept, read a request, let fake_model answer it, write the
// answer (JSON, or SSE as a chunked stream). Everything here runs on the fake's one thread.
#include "fake_llama.hpp"

#include <atomic>
#include <boost/asio/write.hpp>
#include <future>
#include <list>
#include <thread>

#include "fake_llama_model.hpp"
#include "net/beast.hpp"

namespace warmslot::testing {

using namespace std::chrono_literals;

struct fake_llama::impl {
    explicit impl(fake_options o) : model(std::move(o)) {}

    fake_model model;
    net::io_context ctx{1};
    tcp::acceptor acceptor{ctx};
    std::uint16_t port = 0;
    std::list<std::weak_ptr<tcp::socket>> sockets;  // fake thread only
    std::atomic<std::size_t> accepted{0};
    std::thread thread;

    void open() {
        const tcp::endpoint ep(net::ip::make_address("127.0.0.1"), port);
        acceptor.open(ep.protocol());
        acceptor.set_option(tcp::acceptor::reuse_address(true));
        acceptor.bind(ep);
        acceptor.listen();
        port = acceptor.local_endpoint().port();
        net::co_spawn(ctx, accept_loop(), net::detached);
    }

    awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(nothrow);
            if (ec) co_return;
            ++accepted;
            auto s = std::make_shared<tcp::socket>(std::move(socket));
            sockets.remove_if([](const auto& w) { return w.expired(); });
            sockets.push_back(s);
            net::co_spawn(ctx, session(s), net::detached);
        }
    }

    awaitable<void> session(std::shared_ptr<tcp::socket> socket) {
        beast::flat_buffer buffer;
        for (;;) {
            http::request<http::string_body> req;
            auto [ec, n] = co_await http::async_read(*socket, buffer, req, nothrow);
            if (ec) co_return;
            const auto call = model.record(std::string(req.method_string()),
                                           std::string(req.target()), req.body());
            if (!co_await respond(*socket, call, req.keep_alive())) co_return;
        }
    }

    // Answers one call; returns whether the connection may carry another.
    awaitable<bool> respond(tcp::socket& socket, std::size_t call, bool keep_alive) {
        net::steady_timer timer(ctx);
        auto reply = model.handle(call);
        while (!reply) {  // its slot is busy: llama-server holds the request until it is free
            timer.expires_after(2ms);
            auto [ec] = co_await timer.async_wait(nothrow);
            if (ec || !socket.is_open()) co_return false;
            reply = model.handle(call);
        }
        if (const auto d = model.take_delay(call); d.count() > 0) {
            timer.expires_after(d);
            co_await timer.async_wait(nothrow);
        }
        if (!socket.is_open()) co_return false;  // a restart closed it meanwhile
        if (reply->sse && reply->status == 200) co_return co_await stream(socket, call, *reply);
        // The slot is idle before the client has the answer, as with llama-server.
        model.finish(reply->busy_slot, reply->epoch);
        http::response<http::string_body> res{static_cast<http::status>(reply->status), 11};
        res.set(http::field::content_type,
                reply->body.starts_with("{") || reply->body.starts_with("[")
                    ? "application/json; charset=utf-8"
                    : "text/plain; version=0.0.4");
        res.set(http::field::server, "llama.cpp");
        res.body() = std::move(reply->body);
        res.keep_alive(keep_alive);
        res.prepare_payload();
        model.answered(call, reply->status);
        auto [ec, n] = co_await http::async_write(socket, res, nothrow);
        co_return !ec && keep_alive;
    }

    awaitable<bool> stream(tcp::socket& socket, std::size_t call, fake_reply reply) {
        http::response<http::empty_body> res{http::status::ok, 11};
        res.set(http::field::content_type, "text/event-stream");
        res.set(http::field::server, "llama.cpp");
        res.chunked(true);
        http::response_serializer<http::empty_body> sr{res};
        model.answered(call, 200);
        auto [ec, n] = co_await http::async_write_header(socket, sr, nothrow);
        for (std::size_t i = 0; !ec && i < reply.events.size(); ++i) {
            if (i + 1 == reply.events.size()) model.finish(reply.busy_slot, reply.epoch);
            std::tie(ec, n) = co_await net::async_write(
                socket, http::make_chunk(net::buffer(reply.events[i])), nothrow);
        }
        model.finish(reply.busy_slot, reply.epoch);
        if (!ec)
            std::tie(ec, n) = co_await net::async_write(socket, http::make_chunk_last(), nothrow);
        // llama-server closes the connection after a streamed answer.
        error_code ignored;
        socket.shutdown(tcp::socket::shutdown_both, ignored);
        socket.close(ignored);
        co_return false;
    }

    // The old process ends: its listener and connections close, its slots are gone.
    // With `keep_listening` the listener stays (a restart too quick to be seen refusing).
    void end_process(std::optional<std::string> build, std::optional<int> slots,
                     bool keep_listening) {
        error_code ignored;
        if (!keep_listening) acceptor.close(ignored);
        for (auto& w : sockets) {
            if (auto s = w.lock()) {
                s->shutdown(tcp::socket::shutdown_both, ignored);
                s->close(ignored);
            }
        }
        sockets.clear();
        model.restart(std::move(build), slots);
    }

    awaitable<void> come_back(std::chrono::milliseconds down) {
        net::steady_timer timer(ctx, down);
        co_await timer.async_wait(nothrow);
        acceptor = tcp::acceptor(ctx);
        open();
    }
};

fake_llama::fake_llama(fake_options o) : impl_(std::make_unique<impl>(std::move(o))) {
    impl_->open();
    impl_->thread = std::thread([this] { impl_->ctx.run(); });
}

fake_llama::~fake_llama() {
    impl_->ctx.stop();
    impl_->thread.join();
}

std::uint16_t fake_llama::port() const { return impl_->port; }
fake_options fake_llama::options() const { return impl_->model.options(); }
std::vector<fake_call> fake_llama::calls() const { return impl_->model.calls(); }

std::vector<fake_call> fake_llama::calls(std::string_view key) const {
    auto all = impl_->model.calls();
    std::erase_if(all, [&](const fake_call& c) { return c.key != key; });
    return all;
}

bool fake_llama::wait_for(const std::function<bool(const std::vector<fake_call>&)>& pred,
                          std::chrono::milliseconds timeout) const {
    return impl_->model.wait_for(pred, timeout);
}

std::vector<int> fake_llama::slot_tokens(int slot) const { return impl_->model.slot_tokens(slot); }
bool fake_llama::slot_busy(int slot) const { return impl_->model.slot_busy(slot); }

void fake_llama::delay(std::string key, std::chrono::milliseconds d, int times) {
    impl_->model.delay(std::move(key), d, times);
}

void fake_llama::fail(std::string key, unsigned status, std::string message, int times) {
    impl_->model.fail(std::move(key), status, std::move(message), times);
}

void fake_llama::script_slots(std::vector<std::string> bodies) {
    impl_->model.script_slots(std::move(bodies));
}

void fake_llama::put_tokens(int slot, std::vector<int> tokens) {
    impl_->model.put_tokens(slot, std::move(tokens));
}

void fake_llama::restart(std::chrono::milliseconds down, std::optional<std::string> build_info,
                         std::optional<int> slots) {
    // Done on the fake's thread; returns once the new process's slots are empty (the listener
    // comes back `down` later).
    std::promise<void> emptied;
    auto done = emptied.get_future();
    net::post(impl_->ctx, [this, down, build_info, slots, &emptied]() mutable {
        impl_->end_process(std::move(build_info), slots, down.count() == 0);
        if (down.count() > 0) net::co_spawn(impl_->ctx, impl_->come_back(down), net::detached);
        emptied.set_value();
    });
    done.wait();
}

std::size_t fake_llama::connections() const { return impl_->accepted.load(); }

}  // namespace warmslot::testing
