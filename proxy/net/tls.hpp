// TLS on the listener: the server's certificate and key, and the handshake that turns an
// accepted connection into a TLS one. OpenSSL and Asio's SSL headers stay in net/tls.cpp; a
// build without TLS (WARMSLOT_TLS=OFF) links net/tls_off.cpp instead.
//
// A context is immutable once loaded and shared by the connections that use it (a reload loads
// a new one for later connections). accept() runs on the connection's worker.
#pragma once

#include <memory>
#include <string>

#include "net/beast.hpp"
#include "net/timed_stream.hpp"

namespace warmslot::tls {

class server_context;  // net/tls.cpp

// Reads the certificate chain and the private key (PEM) and checks that they belong together.
// TLS 1.2 and 1.3 only. Throws std::runtime_error naming the file and OpenSSL's reason, never
// the key's content; also when this build has no TLS.
std::shared_ptr<const server_context> load_server_context(const std::string& cert_file,
                                                          const std::string& key_file);

// What the handshake of one connection came to.
enum class handshake_result {
    ok,          // the stream now reads and writes through TLS
    plain_http,  // the client spoke plain HTTP: it was answered 400 in plain text
    failed,      // anything else (a bad hello, a client that left, the deadline): close
};

// The server side of the handshake on `stream`, under the stream's deadline (set by the caller).
awaitable<handshake_result> accept(timed_stream& stream,
                                   std::shared_ptr<const server_context> context);

}  // namespace warmslot::tls
