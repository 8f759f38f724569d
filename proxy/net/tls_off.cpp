// A build without TLS (WARMSLOT_TLS=OFF, the default on Windows): no context ever loads, so no
// connection ever becomes a TLS one. The config module refuses `tls` in such a build first.
#include <stdexcept>

#include "net/tls.hpp"

namespace warmslot::tls {

class server_context {};

std::shared_ptr<const server_context> load_server_context(const std::string&, const std::string&) {
    throw std::runtime_error("tls: this warmslot was built without TLS (WARMSLOT_TLS=OFF)");
}

awaitable<handshake_result> accept(timed_stream&, std::shared_ptr<const server_context>) {
    co_return handshake_result::failed;
}

#ifndef _WIN32
class session {};
void session_deleter::operator()(session* s) const noexcept { delete s; }
#endif

}  // namespace warmslot::tls

#ifndef _WIN32
namespace warmslot {

// Never called: tls_ is only ever set by net/tls.cpp.
void timed_stream::tls_read_some(net::mutable_buffer, detail::erased_handler h) {
    h(net::error::operation_not_supported, 0);
}
void timed_stream::tls_write_some(net::const_buffer, detail::erased_handler h) {
    h(net::error::operation_not_supported, 0);
}

}  // namespace warmslot
#endif
