// tls: the certificate and key of the listener. Whether they load is checked at start (and on a
// reload) by the server; here only their form, and whether this build has TLS at all.
#include <string>

#include "config/reader.hpp"

namespace warmslot::config {

bool tls_built() noexcept {
#if WARMSLOT_TLS
    return true;
#else
    return false;
#endif
}

namespace detail {

tls_settings reader::read_tls(const entry& e) const {
    tls_settings out;
    if (e.node.IsNull()) return out;
    const auto path = [&](const entry& v, std::string& into) {
        into = read_scalar(v, "a file path");
        if (into.empty() || into.front() != '/')
            fail(v.line, v.path, "must be an absolute file path");
    };
    read_map(e, {{"cert_file", [&](const entry& v) { path(v, out.cert_file); }},
                 {"key_file", [&](const entry& v) { path(v, out.key_file); }}});
    if (out.cert_file.empty()) fail(e.line, child_path(e.path, "cert_file"), "is required");
    if (out.key_file.empty()) fail(e.line, child_path(e.path, "key_file"), "is required");
    if (!tls_built())
        fail(e.line, e.path,
             "this warmslot was built without TLS (CMake option WARMSLOT_TLS=OFF, the default on "
             "Windows); put a TLS-terminating proxy in front of it instead");
    return out;
}

}  // namespace detail
}  // namespace warmslot::config
