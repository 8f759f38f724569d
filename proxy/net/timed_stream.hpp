// A TCP socket with one deadline: what warmslot used beast::tcp_stream for, at a fraction of
// its cost per operation.
//
// beast::tcp_stream starts a timer wait with every read and write it does and cancels it when
// the operation ends: a timer-queue insert and removal, a cancelled wait handler run through
// the scheduler, and reference-count traffic, four times per proxied request. Here the deadline
// is a time point; setting it is a store. One timer per stream, armed lazily, wakes at the
// earliest deadline it knows of: a deadline that is still ahead then (it was moved later)
// re-arms it, one that has passed cuts the pending operation. A connection that is served
// normally thus costs a timer operation now and then, not per read or write.
//
// Semantics as with beast::tcp_stream, except for what a timeout leaves behind: a deadline cuts
// only an operation that is pending when it passes (or starts after it passed), which then
// completes with beast::error::timeout. While nothing is pending a passed deadline does nothing.
// expires_never() lifts it. A timeout cancels the socket's operations rather than closing it,
// so that the owner can still answer (a 408 to a client whose body did not arrive in time);
// every owner ends the connection after a timeout. The timer's wait may stay pending after the
// operations end, until it wakes or disarm() or the destructor ends it.
//
// Used on one thread at a time (its executor's); the stream must outlive its pending
// operations, as a socket must.
//
// A server connection may speak TLS (POSIX builds with WARMSLOT_TLS): after tls::accept
// (net/tls.hpp) its reads and writes go through an OpenSSL session on the same socket, under the
// same deadline. The TLS types stay in net/tls.cpp: here the handler of a TLS operation is
// type-erased (one allocation per operation, only on TLS connections).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

#include "net/beast.hpp"

#ifdef _WIN32

namespace warmslot {

// Windows: beast::tcp_stream behind the same interface. With the stream below, a service under
// wine did not finish stopping (the control thread_pool's destructor never returned) and the
// cause was not found; Beast's per-operation timers are known to work there. Differences: a
// timeout closes the socket (no 408 reaches a slow client), and timed_out() is not offered.
class timed_stream {
  public:
    using executor_type = net::any_io_executor;
    using clock = std::chrono::steady_clock;

    explicit timed_stream(const executor_type& ex) : stream_(ex) {}
    explicit timed_stream(tcp::socket socket) : stream_(std::move(socket)) {}

    executor_type get_executor() noexcept { return stream_.get_executor(); }
    tcp::socket& socket() noexcept { return stream_.socket(); }
    template <typename Rep, typename Period>
    void expires_after(std::chrono::duration<Rep, Period> d) {
        stream_.expires_after(d);
    }
    void expires_at(clock::time_point deadline) { stream_.expires_at(deadline); }
    void expires_never() { stream_.expires_never(); }
    void disarm() { stream_.expires_never(); }
    void close() noexcept { stream_.close(); }

    template <typename MutableBuffers, typename Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        return stream_.async_read_some(buffers, std::forward<Token>(token));
    }
    template <typename ConstBuffers, typename Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return stream_.async_write_some(buffers, std::forward<Token>(token));
    }
    template <typename Token>
    auto async_connect(const tcp::endpoint& endpoint, Token&& token) {
        return stream_.async_connect(endpoint, std::forward<Token>(token));
    }
    template <typename Endpoints, typename Token>
    auto async_connect_any(const Endpoints& endpoints, Token&& token) {
        return stream_.async_connect(endpoints, std::forward<Token>(token));
    }

  private:
    beast::tcp_stream stream_;
};

}  // namespace warmslot

#else

namespace warmslot {

class timed_stream;

namespace tls {
class session;    // net/tls.cpp
class transport;  // net/tls.cpp
struct session_deleter {
    void operator()(session* s) const noexcept;
};
}  // namespace tls

namespace detail {

// A completion handler of (error_code, size_t), type-erased for the TLS session, whose
// operations are not templates. Move-only; invoked at most once, after its memory is freed.
class erased_handler {
  public:
    // Never given an erased_handler: the handlers are Asio's and Beast's.
    template <typename Handler>
    explicit erased_handler(Handler&& h)  // NOLINT(bugprone-forwarding-reference-overload)
        : impl_(std::make_unique<impl<std::decay_t<Handler> > >(std::forward<Handler>(h))) {}
    void operator()(error_code ec, std::size_t n) {
        auto* p = impl_.release();
        p->invoke_and_free(ec, n);
    }

  private:
    struct base {
        virtual ~base() = default;
        virtual void invoke_and_free(error_code ec, std::size_t n) = 0;
    };
    template <typename Handler>
    struct impl final : base {
        explicit impl(Handler&& h) : handler(std::move(h)) {}
        void invoke_and_free(error_code ec, std::size_t n) override {
            Handler local(std::move(handler));
            delete this;
            std::move(local)(ec, n);
        }
        Handler handler;
    };
    std::unique_ptr<base> impl_;
};

// The first non-empty buffer of a sequence: what one TLS read or write moves at most.
template <typename Buffer, typename Buffers>
Buffer first_buffer(const Buffers& buffers) {
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
        const Buffer b(*it);
        if (b.size() > 0) return b;
    }
    return Buffer();
}

// Completion handler of a stream's operation: ends it as pending and reports an error as a
// timeout once the stream's deadline has cut it. Forwards the inner handler's associated
// executor, allocator and cancellation slot.
template <typename Handler>
struct timeout_mapped {
    Handler inner;
    timed_stream* stream;

    template <typename... Args>
    void operator()(error_code ec, Args&&... args);
};

}  // namespace detail

class timed_stream {
  public:
    using executor_type = net::any_io_executor;
    using clock = std::chrono::steady_clock;

    explicit timed_stream(const executor_type& ex);
    explicit timed_stream(tcp::socket socket);
    ~timed_stream();
    timed_stream(const timed_stream&) = delete;
    timed_stream& operator=(const timed_stream&) = delete;

    executor_type get_executor() noexcept { return socket_.get_executor(); }
    tcp::socket& socket() noexcept { return socket_; }

    template <typename Rep, typename Period>
    void expires_after(std::chrono::duration<Rep, Period> d) {
        expires_at(clock::now() + std::chrono::duration_cast<clock::duration>(d));
    }
    void expires_at(clock::time_point deadline);
    void expires_never() noexcept { deadline_ = clock::time_point::max(); }
    // expires_never() that also ends the timer's wait, for a stream that goes idle for an
    // unknown time (a pooled connection): a pending wait is work that keeps its executor
    // running (a thread_pool's join() would wait for it).
    void disarm();
    // Whether a deadline has cut an operation.
    bool timed_out() const noexcept { return timed_out_; }
    void close() noexcept;

    template <typename MutableBuffers, typename Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token) {
        return net::async_initiate<Token, void(error_code, std::size_t)>(
            [](auto handler, timed_stream* self, const MutableBuffers& b) {
                if (self->tls_) {
                    // Under the deadline: each socket operation of the TLS session is.
                    self->tls_read_some(detail::first_buffer<net::mutable_buffer>(b),
                                        detail::erased_handler(std::move(handler)));
                    return;
                }
                self->socket_.async_read_some(b, self->mapped(std::move(handler)));
            },
            token, this, buffers);
    }

    template <typename ConstBuffers, typename Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token) {
        return net::async_initiate<Token, void(error_code, std::size_t)>(
            [](auto handler, timed_stream* self, const ConstBuffers& b) {
                if (self->tls_) {
                    self->tls_write_some(detail::first_buffer<net::const_buffer>(b),
                                         detail::erased_handler(std::move(handler)));
                    return;
                }
                self->socket_.async_write_some(b, self->mapped(std::move(handler)));
            },
            token, this, buffers);
    }

    template <typename Token>
    auto async_connect(const tcp::endpoint& endpoint, Token&& token) {
        return net::async_initiate<Token, void(error_code)>(
            [](auto handler, timed_stream* self, const tcp::endpoint& ep) {
                self->socket_.async_connect(ep, self->mapped(std::move(handler)));
            },
            token, this, endpoint);
    }

    // Tries each endpoint of a resolver's results in turn; completes with the one connected.
    template <typename Endpoints, typename Token>
    auto async_connect_any(const Endpoints& endpoints, Token&& token) {
        return net::async_initiate<Token, void(error_code, tcp::endpoint)>(
            [](auto handler, timed_stream* self, const Endpoints& eps) {
                net::async_connect(self->socket_, eps, self->mapped(std::move(handler)));
            },
            token, this, endpoints);
    }

  private:
    // What a timer wait needs to know when it ends; outlives the stream until its last wait
    // ends.
    struct timer_state;

    template <typename Handler>
    friend struct detail::timeout_mapped;
    friend class tls::session;
    friend class tls::transport;

    // net/tls.cpp: one read or write through the TLS session.
    void tls_read_some(net::mutable_buffer b, detail::erased_handler h);
    void tls_write_some(net::const_buffer b, detail::erased_handler h);

    // An operation starts: the deadline now counts.
    template <typename Handler>
    detail::timeout_mapped<Handler> mapped(Handler&& h) {
        ++pending_;
        if (deadline_ != clock::time_point::max()) watch();
        // Asio hands every initiation its handler as an rvalue: moved, as Asio's own do.
        return {std::move(h), this};  // NOLINT(bugprone-move-forwarding-reference)
    }
    void watch();  // makes sure the timer wakes by deadline_
    void arm(clock::time_point at);
    void on_timer();

    tcp::socket socket_;
    clock::time_point deadline_ = clock::time_point::max();
    unsigned pending_ = 0;  // operations started and not completed
    bool timed_out_ = false;
    net::steady_timer timer_;
    std::shared_ptr<timer_state> state_;
    std::unique_ptr<tls::session, tls::session_deleter> tls_;  // set by tls::accept
};

template <typename Handler>
template <typename... Args>
void detail::timeout_mapped<Handler>::operator()(error_code ec, Args&&... args) {
    --stream->pending_;
    if (ec && stream->timed_out_) ec = beast::error::timeout;
    std::move(inner)(ec, std::forward<Args>(args)...);
}

}  // namespace warmslot

namespace boost::asio {

template <template <typename, typename> class Associator, typename Handler,
          typename DefaultCandidate>
struct associator<Associator, warmslot::detail::timeout_mapped<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type get(
        const warmslot::detail::timeout_mapped<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.inner);
    }
    static auto get(const warmslot::detail::timeout_mapped<Handler>& h,
                    const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.inner, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.inner, c);
    }
};

}  // namespace boost::asio

#endif  // _WIN32
