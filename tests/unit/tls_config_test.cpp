// tls: the listener's certificate and key in the config, and what a reload does with them.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/reload.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;

namespace {

const std::string backends = "backends:\n  - name: a\n    url: http://127.0.0.1:8081\n";

cfg::config parse(const std::string& yaml) { return cfg::parse(backends + yaml, "test.yaml", {}); }

}  // namespace

TEST_CASE("config: tls is off unless set, and takes two absolute paths") {
    CHECK_FALSE(parse("").tls.enabled());
    CHECK_FALSE(parse("tls:\n").tls.enabled());
    if (!cfg::tls_built()) return;  // a build without TLS refuses it (below)
    const auto c = parse("tls:\n  cert_file: /etc/ws/cert.pem\n  key_file: /etc/ws/key.pem\n");
    CHECK(c.tls.enabled());
    CHECK(c.tls.cert_file == "/etc/ws/cert.pem");
    CHECK(c.tls.key_file == "/etc/ws/key.pem");
}

TEST_CASE("config: bad tls settings are refused") {
    const std::vector<warmslot::test::bad_case> cases = {
        {backends + "tls:\n  cert_file: /c.pem\n", "tls.key_file", 5, "is required"},
        {backends + "tls:\n  key_file: /k.pem\n", "tls.cert_file", 5, "is required"},
        {backends + "tls:\n  cert_file: c.pem\n  key_file: /k.pem\n", "tls.cert_file", 5,
         "must be an absolute file path"},
        {backends + "tls:\n  cert_file: /c.pem\n  key_file: /k.pem\n  ciphers: x\n", "tls.ciphers",
         7, "unknown key"},
        {backends + "tls: /c.pem\n", "tls", 4, "expected a map"},
    };
    for (const auto& c : cases) {
        warmslot::test::check_rejected(
            c, [](const std::string& yaml) { return cfg::parse(yaml, "test.yaml", {}); });
    }
    if (cfg::tls_built()) return;
    warmslot::test::check_rejected(
        {backends + "tls:\n  cert_file: /c.pem\n  key_file: /k.pem\n", "tls", 5,
         "built without TLS"},
        [](const std::string& yaml) { return cfg::parse(yaml, "test.yaml", {}); });
}

TEST_CASE("reload: new tls files are used; turning tls on or off waits for the next start") {
    if (!cfg::tls_built()) return;
    const auto on = parse("tls:\n  cert_file: /c1.pem\n  key_file: /k1.pem\n");
    const auto renewed = parse("tls:\n  cert_file: /c2.pem\n  key_file: /k2.pem\n");
    const auto off = parse("");

    const auto same_on = cfg::plan_reload(on, renewed);
    CHECK(same_on.next.tls.cert_file == "/c2.pem");
    CHECK(same_on.next.tls.key_file == "/k2.pem");
    CHECK(same_on.changes.empty());

    const auto turned_off = cfg::plan_reload(on, off);
    CHECK(turned_off.next.tls.cert_file == "/c1.pem");
    REQUIRE(turned_off.changes.size() == 1);
    CHECK(turned_off.changes[0] == "tls: turning it off takes effect at the next start");

    const auto turned_on = cfg::plan_reload(off, on);
    CHECK_FALSE(turned_on.next.tls.enabled());
    REQUIRE(turned_on.changes.size() == 1);
    CHECK(turned_on.changes[0] == "tls: turning it on takes effect at the next start");
}
