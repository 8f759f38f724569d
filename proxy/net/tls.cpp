// TLS with OpenSSL through Asio's ssl::stream, on the socket of a timed_stream: the only file
// that sees OpenSSL and boost/asio/ssl.
#include "net/tls.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace warmslot::tls {

namespace ssl = boost::asio::ssl;

class server_context {
  public:
    server_context() : ctx(ssl::context::tls_server) {}
    // Mutable: each connection's SSL object is made from it (SSL_new takes a reference);
    // nothing changes it after loading.
    mutable ssl::context ctx;
};

// The socket of a timed_stream as a TLS session's transport, read and written under the
// stream's deadline: every socket operation the session starts (several per handshake, read or
// write) is cut once the deadline has passed, as a plain one is.
class transport {
  public:
    using lowest_layer_type = tcp::socket::lowest_layer_type;
    using executor_type = tcp::socket::executor_type;

    explicit transport(timed_stream& s) : s_(&s) {}
    lowest_layer_type& lowest_layer() { return s_->socket_.lowest_layer(); }
    const lowest_layer_type& lowest_layer() const { return s_->socket_.lowest_layer(); }
    executor_type get_executor() { return s_->socket_.get_executor(); }

    template <typename MutableBuffers, typename Handler>
    void async_read_some(const MutableBuffers& b, Handler&& h) {
        s_->socket_.async_read_some(b, s_->mapped(std::forward<Handler>(h)));
    }
    template <typename ConstBuffers, typename Handler>
    void async_write_some(const ConstBuffers& b, Handler&& h) {
        s_->socket_.async_write_some(b, s_->mapped(std::forward<Handler>(h)));
    }

  private:
    timed_stream* s_;
};

// One connection's TLS session, owned by its timed_stream.
class session {
  public:
    static awaitable<handshake_result> accept(timed_stream& s,
                                              std::shared_ptr<const server_context> c);

    session(timed_stream& s, std::shared_ptr<const server_context> c)
        : context(std::move(c)), stream(transport(s), context->ctx) {}
    std::shared_ptr<const server_context> context;  // outlives `stream`'s SSL object
    ssl::stream<transport> stream;
};

void session_deleter::operator()(session* s) const noexcept { delete s; }

namespace {

// OpenSSL's reason for a failure, for a startup error.
std::string openssl_reason(const boost::system::error_code& ec) {
    return ec.message().empty() ? "unknown OpenSSL error" : ec.message();
}

// OpenSSL refused the first record because it starts like a plain HTTP request ("GET ",
// "POST ", "HEAD ", "PUT "); no alert was sent, so the client can read a plain answer.
bool is_plain_http(const error_code& ec) {
    return ec.category() == net::error::get_ssl_category() &&
           ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST;
}

// The answer to plain HTTP on the TLS port, in plain text: an error in the OpenAI shape.
std::string plain_http_answer() {
    constexpr std::string_view body =
        R"({"error":{"code":400,"message":"this port speaks HTTPS: use https:// to reach it",)"
        R"("type":"invalid_request_error"}})";
    return fmt::format(
        "HTTP/1.1 400 Bad Request\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        "Cache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Connection: close\r\n"
        "Content-Length: {}\r\n\r\n{}",
        body.size(), body);
}

}  // namespace

std::shared_ptr<const server_context> load_server_context(const std::string& cert_file,
                                                          const std::string& key_file) {
    auto c = std::make_shared<server_context>();
    boost::system::error_code ec;
    c->ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                       ec);
    if (ec) throw std::runtime_error("tls: cannot set up OpenSSL: " + openssl_reason(ec));
    c->ctx.use_certificate_chain_file(cert_file, ec);
    if (ec) {
        throw std::runtime_error("tls.cert_file " + cert_file +
                                 ": cannot load the certificate chain: " + openssl_reason(ec));
    }
    c->ctx.use_private_key_file(key_file, ssl::context::pem, ec);
    const bool mismatch =
        ec && ec.category() == net::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
    if (mismatch || (!ec && SSL_CTX_check_private_key(c->ctx.native_handle()) != 1)) {
        ERR_clear_error();
        throw std::runtime_error("tls.key_file " + key_file +
                                 ": the private key does not match the certificate in " +
                                 cert_file);
    }
    if (ec) {
        throw std::runtime_error("tls.key_file " + key_file +
                                 ": cannot load the private key: " + openssl_reason(ec));
    }
    return c;
}

awaitable<handshake_result> session::accept(timed_stream& s,
                                            std::shared_ptr<const server_context> c) {
    s.tls_.reset(new session(s, std::move(c)));
    auto [ec] = co_await s.tls_->stream.async_handshake(ssl::stream_base::server, nothrow);
    if (!ec) co_return handshake_result::ok;
    if (!is_plain_http(ec) || s.timed_out()) co_return handshake_result::failed;
    // The answer goes around the TLS session, in plain text, under the same deadline.
    s.tls_.reset();
    const std::string answer = plain_http_answer();
    co_await net::async_write(s, net::buffer(answer), nothrow);
    co_return handshake_result::plain_http;
}

awaitable<handshake_result> accept(timed_stream& stream,
                                   std::shared_ptr<const server_context> context) {
    return session::accept(stream, std::move(context));
}

}  // namespace warmslot::tls

namespace warmslot {

void timed_stream::tls_read_some(net::mutable_buffer b, detail::erased_handler h) {
    tls_->stream.async_read_some(b, [h = std::move(h)](error_code ec, std::size_t n) mutable {
        // A client that closes without TLS's close_notify ends its stream like a plain one.
        if (ec == net::ssl::error::stream_truncated) ec = net::error::eof;
        h(ec, n);
    });
}

void timed_stream::tls_write_some(net::const_buffer b, detail::erased_handler h) {
    tls_->stream.async_write_some(
        b, [h = std::move(h)](error_code ec, std::size_t n) mutable { h(ec, n); });
}

}  // namespace warmslot
