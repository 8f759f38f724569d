// Keys, roles and tenants; the Content-Type, Host and CORS rules; control characters escaped;
// the per-tenant rewrite memory and dashboard activity. Tables over pure functions.
#include "api/access.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/forward_headers.hpp"
#include "config/config.hpp"
#include "config_fixtures.hpp"
#include "rewrite/rewrite.hpp"
#include "status/activity.hpp"
#include "util/escape.hpp"
#include "util/secrets.hpp"

namespace api = warmslot::api;
namespace cfg = warmslot::config;
using cfg::key_role;

namespace {

cfg::config parse(const std::string& yaml) {
    return cfg::parse("backends:\n  - name: a\n    url: http://127.0.0.1:8081\n" + yaml,
                      "test.yaml", [](const std::string& name) -> std::optional<std::string> {
                          if (name == "WS_KEY") return "sk-from-the-environment";
                          return std::nullopt;
                      });
}

}  // namespace

TEST_CASE("access: the role each endpoint needs") {
    struct row {
        const char* method;
        const char* target;
        bool client, observer, admin;
    };
    const std::vector<row> rows = {
        {"POST", "/v1/chat/completions", true, false, true},
        {"POST", "/v1/messages", true, false, true},
        {"POST", "/warmslot/explain", true, false, true},
        {"GET", "/v1/models", true, false, true},
        {"GET", "/props", true, false, true},
        {"GET", "/slots", false, false, true},  // every slot's state, whoever's
        {"GET", "/slots?fail_on_no_slot=1", false, false, true},
        {"POST", "/admin/warm", false, false, true},
        {"POST", "/admin/snapshot", false, false, true},
        {"GET", "/metrics", false, true, true},
        {"GET", "/warmslot/status", true, true, true},  // filtered to the tenant
        {"GET", "/health", true, true, true},           // no key needed
        {"GET", "/warmslot/", true, true, true},
        {"GET", "/nowhere", true, true, true},  // 404 for all
    };
    for (const auto& r : rows) {
        CAPTURE(r.target);
        const auto ep = api::classify(r.method, r.target);
        const auto path = api::path_of(r.target);
        CHECK(api::permits(key_role::client, ep, path) == r.client);
        CHECK(api::permits(key_role::observer, ep, path) == r.observer);
        CHECK(api::permits(key_role::admin, ep, path) == r.admin);
    }
}

TEST_CASE("access: only bodies declared as JSON") {
    struct row {
        const char* value;
        bool ok;
    };
    const std::vector<row> rows = {
        {"application/json", true},
        {"application/json; charset=utf-8", true},
        {"Application/JSON", true},
        {"application/vnd.api+json", true},
        {" application/json ", true},
        {"text/plain", false},  // what a cross-site form or fetch without preflight sends
        {"text/plain;charset=UTF-8", false},
        {"application/x-www-form-urlencoded", false},
        {"multipart/form-data; boundary=x", false},
        {"application/jsonx", false},
        {"application/", false},
        {"application/+json", false},
        {";", false},
        {"json", false},
        {"", false},  // a fetch() of bytes or a Blob: no Content-Type, no preflight
        {" ", false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.value);
        CHECK(api::json_content_type(r.value) == r.ok);
    }
}

TEST_CASE("access: the Host allow-list") {
    const std::vector<std::string> none;
    struct row {
        const char* host;
        const char* listen;
        bool ok;
    };
    // Not configured: on a loopback listener `localhost` and the listener's own address; on
    // any other `localhost` and address literals (a name must be configured).
    const std::vector<row> defaults = {
        {"127.0.0.1:8080", "127.0.0.1", true},
        {"localhost:8080", "127.0.0.1", true},
        {"LOCALHOST", "127.0.0.1", true},
        {"localhost.:8080", "127.0.0.1", true},
        {"127.0.0.1:8080", "localhost", true},  // "localhost" listens on 127.0.0.1
        {"[::1]:8080", "::1", true},
        {"127.0.0.2:8080", "127.0.0.2", true},
        {"127.0.0.2:8080", "127.0.0.1", false},  // not the listener's address
        {"[::1]:8080", "127.0.0.1", false},
        {"", "127.0.0.1", false},  // an empty Host
        {" ", "127.0.0.1", false},
        {":8080", "127.0.0.1", false},
        {"evil.example:8080", "127.0.0.1", false},  // DNS rebinding
        {"127.0.0.1.evil.example", "127.0.0.1", false},
        {"w", "127.0.0.1", false},
        {"evil.example:8080", "localhost", false},
        {"evil.example:8080", "::1", false},
        {"evil.example", "0.0.0.0", false},  // a name on a LAN listener: configure it
        {"evil.example", "192.168.1.5", false},
        {"1.2.3.4.evil.example", "0.0.0.0", false},
        {"192.168.1.5:8080", "0.0.0.0", true},  // clients that connect by address
        {"10.200.1.2", "10.200.1.2", true},
        {"[fe80::1]:8080", "::", true},
        {"localhost:8080", "0.0.0.0", true},
        {"", "0.0.0.0", false},
        {"1.2.3", "0.0.0.0", false},
        {"1.2.3.4567", "0.0.0.0", false},
    };
    for (const auto& r : defaults) {
        CAPTURE(r.host);
        CAPTURE(r.listen);
        CHECK(api::host_allowed(r.host, none, false, r.listen) == r.ok);
    }
    const std::vector<std::string> listed = {"warmslot.lan", "10.0.0.2"};
    CHECK(api::host_allowed("warmslot.lan:8080", listed, true, "0.0.0.0"));
    CHECK(api::host_allowed("WARMSLOT.lan", listed, true, "0.0.0.0"));
    CHECK(api::host_allowed("10.0.0.2:80", listed, true, "0.0.0.0"));
    CHECK_FALSE(api::host_allowed("localhost:8080", listed, true, "127.0.0.1"));
    CHECK_FALSE(api::host_allowed("evil.example", listed, true, "0.0.0.0"));
    CHECK(api::host_allowed("anything", {"*"}, true, "127.0.0.1"));
    CHECK(api::host_name("[fe80::1]:80") == "fe80::1");
    CHECK(api::host_name("fe80::1") == "fe80::1");
    CHECK_FALSE(api::host_allowed("", listed, true, "0.0.0.0"));
    CHECK_FALSE(api::host_allowed("", {"*"}, true, "0.0.0.0"));
}

TEST_CASE("access: CORS origins match exactly") {
    const std::vector<std::string> origins = {"https://app.example", "http://localhost:3000"};
    CHECK(api::origin_allowed("https://app.example", origins));
    CHECK(api::origin_allowed("HTTPS://APP.example", origins));
    CHECK(api::origin_allowed("http://localhost:3000", origins));
    CHECK_FALSE(api::origin_allowed("http://localhost:3001", origins));
    CHECK_FALSE(api::origin_allowed("https://app.example.evil", origins));
    CHECK_FALSE(api::origin_allowed("null", origins));
    CHECK_FALSE(api::origin_allowed("", origins));
    CHECK_FALSE(api::origin_allowed("https://app.example", {}));
}

TEST_CASE("access: a page of another origin is refused unless its origin is listed") {
    const std::vector<std::string> listed = {"https://app.example"};
    struct row {
        const char* origin;
        const char* site;
        const char* mode;
        const char* host;
        bool safe;
        bool cross;
    };
    const std::vector<row> rows = {
        {"", "", "", "127.0.0.1:8080", false, false},  // curl, SDKs: no browser headers
        {"http://127.0.0.1:8080", "same-origin", "cors", "127.0.0.1:8080", false, false},
        {"https://warmslot.lan", "same-origin", "cors", "warmslot.lan", false, false},
        {"http://LOCALHOST:8080", "", "", "localhost:8080", false, false},
        {"", "same-origin", "cors", "127.0.0.1:8080", true, false},     // the dashboard's GETs
        {"", "none", "navigate", "127.0.0.1:8080", true, false},        // typed in the address bar
        {"", "cross-site", "navigate", "127.0.0.1:8080", true, false},  // a link followed
        {"https://app.example", "cross-site", "cors", "127.0.0.1:8080", false, false},
        // What the issue saw served: a fetch() from a foreign page.
        {"https://evil.example", "cross-site", "no-cors", "127.0.0.1:8080", false, true},
        {"https://evil.example", "", "", "127.0.0.1:8080", false, true},  // an old browser
        {"", "cross-site", "no-cors", "127.0.0.1:8080", true, true},      // <img src>, <script>
        {"", "cross-site", "navigate", "127.0.0.1:8080", false, true},    // a form's POST
        {"http://127.0.0.1:3000", "same-site", "no-cors", "127.0.0.1:8080", false, true},
        {"http://127.0.0.1:8080", "same-origin", "cors", "localhost:8080", false, true},
        {"http://127.0.0.1:8080", "", "", "", false, true},  // no Host to be the origin of
        {"null", "cross-site", "no-cors", "127.0.0.1:8080", false, true},  // sandboxed frame
        {"file://", "", "", "127.0.0.1:8080", false, true},
        {"http://127.0.0.1:8080.evil.example", "", "", "127.0.0.1:8080", false, true},
        {"ftp://127.0.0.1:8080", "", "", "127.0.0.1:8080", false, true},
    };
    for (const auto& r : rows) {
        CAPTURE(r.origin);
        CAPTURE(r.site);
        CAPTURE(r.host);
        const api::request_site site{r.origin, r.site, r.mode, r.host, r.safe};
        CHECK(api::cross_site(site, listed) == r.cross);
    }
}

TEST_CASE("escape_controls: C0, DEL, C1 and stray bytes are escaped, text is kept") {
    using warmslot::util::escape_controls;
    struct row {
        std::string in, out;
    };
    const std::vector<row> rows = {
        {"/v1/chat/completions", "/v1/chat/completions"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"a\x1b[2Jb", "a\\x1b[2Jb"},
        {"line\nnext\r\t", "line\\x0anext\\x0d\\x09"},
        {std::string("nul\0x", 5), "nul\\x00x"},
        {"del\x7f", "del\\x7f"},
        {"csi\xc2\x9b"
         "31m",
         "csi\\u009b31m"},  // U+009B, CSI to a terminal
        {"osc\xc2\x9d"
         "0;x\xc2\x9c",
         "osc\\u009d0;x\\u009c"},
        {"\xc2\x80\xc2\x9f\xc2\xa0", "\\u0080\\u009f\xc2\xa0"},  // U+00A0 is printable
        {"raw\x9b", "raw\\x9b"},                                 // not UTF-8: an 8-bit CSI
        {"\xc3", "\\xc3"},
        {"\xe2\x82", "\\xe2\\x82"},
        {"\xc0\xaf", "\\xc0\\xaf"},           // overlong
        {"\xed\xa0\x80", "\\xed\\xa0\\x80"},  // a surrogate
        {"back\\slash", "back\\slash"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.in);
        CHECK(escape_controls(r.in) == r.out);
        CHECK(warmslot::util::has_controls(r.in) == (r.in != r.out));
    }
}

TEST_CASE("matching_key: the index of the key, every key compared") {
    using warmslot::util::matching_key;
    const std::vector<std::string> keys = {"alpha-key-1", "beta-key-22", "gamma-key-3"};
    CHECK(matching_key("alpha-key-1", keys) == 0);
    CHECK(matching_key("beta-key-22", keys) == 1);
    CHECK(matching_key("gamma-key-3", keys) == 2);
    CHECK(matching_key("gamma-key-", keys) == 3);
    CHECK(matching_key("", keys) == 3);
    CHECK(matching_key("x", {}) == 0);
}

TEST_CASE("config: api_keys with roles and tenants; a plain key is an admin, a map a client") {
    const auto c = parse(
        "api_keys:\n"
        "  - plain-admin-key\n"
        "  - key: ${WS_KEY}\n"
        "    role: client\n"
        "    tenant: team-a\n"
        "  - {key: observer-key-1, role: observer}\n"
        "  - {key: client-of-b-1, tenant: b}\n");
    REQUIRE(c.api_keys.size() == 4);
    REQUIRE(c.key_grants.size() == 4);
    CHECK(c.api_keys[1] == "sk-from-the-environment");
    CHECK(c.key_grants[0].role == key_role::admin);
    CHECK(c.key_grants[0].tenant.empty());
    CHECK(c.key_grants[1].role == key_role::client);
    CHECK(c.key_grants[1].tenant == "team-a");
    CHECK(c.key_grants[2].role == key_role::observer);
    CHECK(c.key_grants[2].tenant.empty());
    CHECK(c.key_grants[3].role == key_role::client);  // no role: a client, never an admin
    CHECK(c.key_grants[3].tenant == "b");
    // What `warmslot check-config` prints: each key's role, never the key.
    const auto lines = cfg::describe_keys(c);
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "api_keys[0]: admin of the default tenant");
    CHECK(lines[1] == "api_keys[1]: client of tenant team-a");
    CHECK(lines[3] == "api_keys[3]: client of tenant b");
}

TEST_CASE("config: http settings") {
    const auto none = parse("");
    CHECK_FALSE(none.http.allowed_hosts_set);
    CHECK(none.http.cors_origins.empty());
    const auto c = parse(
        "http:\n  allowed_hosts: [warmslot.lan, 10.0.0.2]\n"
        "  cors_origins: [\"https://app.example\", \"http://localhost:3000\"]\n");
    CHECK(c.http.allowed_hosts_set);
    CHECK(c.http.allowed_hosts == std::vector<std::string>{"warmslot.lan", "10.0.0.2"});
    CHECK(c.http.cors_origins.size() == 2);
}

TEST_CASE("config: bad keys, roles, tenants and http settings are refused") {
    const std::string b = "backends:\n  - name: a\n    url: http://127.0.0.1:8081\n";
    const std::vector<warmslot::test::bad_case> cases = {
        {b + "api_keys:\n  - {role: client}\n", "api_keys[0].key", 5, "is required"},
        {b + "api_keys:\n  - {key: long-enough-1, role: root}\n", "api_keys[0].role", 5,
         "unknown role"},
        {b + "api_keys:\n  - {key: long-enough-1, tenant: \"a b\"}\n", "api_keys[0].tenant", 5,
         "1 to 64 characters"},
        {b + "api_keys:\n  - {key: short}\n", "api_keys[0].key", 5, "too short"},
        {b + "api_keys:\n  - {key: long-enough-1, colour: red}\n", "api_keys[0].colour", 5,
         "unknown key"},
        {b + "api_keys:\n  - long-enough-1\n  - {key: long-enough-1}\n", "api_keys[1]", 6,
         "same key as api_keys[0]"},
        {b + "http:\n  cors_origins: [\"https://app.example/\"]\n", "http.cors_origins[0]", 5,
         "must be an origin"},
        {b + "http:\n  cors_origins: [app.example]\n", "http.cors_origins[0]", 5,
         "must be an origin"},
        {b + "http:\n  allowed_hosts: [\"\"]\n", "http.allowed_hosts[0]", 5, "host name"},
    };
    for (const auto& c : cases) {
        warmslot::test::check_rejected(
            c, [](const std::string& yaml) { return cfg::parse(yaml, "test.yaml", {}); });
    }
}

TEST_CASE("rewriter: one tenant's documents never rewrite another's request") {
    cfg::rewrite_settings s;
    s.defaults.edits = cfg::edit_mode::append;
    s.defaults.edit_id = "<doc id=\"([^\"]+)\">";
    s.defaults.document_min_bytes = 256;
    s.defaults.max_note_bytes = 1 << 16;
    warmslot::rewrite::rewriter r(s);
    const auto doc = [](const std::string& who) {
        std::string d = "<doc id=\"spec\">\n";
        for (int i = 0; i < 40; ++i) d += who + " line " + std::to_string(i) + " of the spec.\n";
        return d;
    };
    const auto body = [](const std::string& d, const std::string& q) {
        return nlohmann::json{
            {"messages", nlohmann::json::array({{{"role", "system"}, {"content", d}},
                                                {{"role", "user"}, {"content", q}}})}};
    };
    const auto first = r.apply("a", body(doc("secret-of-a"), "Q1"), "m");
    REQUIRE(first);
    r.remember("a", *first);
    // The same edit_id from tenant b: its own text goes out, nothing of a's.
    const auto other = r.apply("b", body(doc("b-words"), "Q2"), "m");
    REQUIRE(other);
    CHECK(other->body.dump().find("secret-of-a") == std::string::npos);
    CHECK(warmslot::rewrite::describe(other->applied) == "none");
    // From tenant a itself the revision is recognised: the original goes out again.
    const auto same = r.apply("a", body(doc("a-revised"), "Q3"), "m");
    REQUIRE(same);
    CHECK(warmslot::rewrite::describe(same->applied) == "edits_append=1");
    CHECK(same->body["messages"][0]["content"] == doc("secret-of-a"));
    CHECK(r.remembered("a").documents() == 1);
    CHECK(r.remembered("b").documents() == 0);
}

TEST_CASE("activity: a tenant's view holds its own requests and previews") {
    warmslot::status::activity a;
    for (const char* t : {"a", "b", ""}) {
        warmslot::status::request_record r;
        r.at_ms = 1000;
        r.id = t;
        r.tenant = t;
        a.record(r);
    }
    a.set_preview("gpu0", 0, {"a's document", false, 1000, "a"});
    a.set_preview("gpu0", 1, {"b's label", true, 1000, "b"});
    const std::string tenant_a = "a";
    const auto va = a.view(2000, &tenant_a);
    REQUIRE(va.requests.size() == 1);
    CHECK(va.requests[0].tenant == "a");
    REQUIRE(va.previews.size() == 1);
    CHECK(va.previews.begin()->second.text == "a's document");
    const auto all = a.view(2000);
    CHECK(all.requests.size() == 3);
    CHECK(all.previews.size() == 2);
}

TEST_CASE("forward_response_header: llama-server's CORS headers stay behind") {
    CHECK_FALSE(api::forward_response_header("Access-Control-Allow-Origin"));
    CHECK_FALSE(api::forward_response_header("access-control-allow-credentials"));
    CHECK_FALSE(api::forward_response_header("ACCESS-CONTROL-ALLOW-HEADERS"));
    CHECK(api::forward_response_header("Content-Type"));
    CHECK(api::forward_response_header("Access-Controlled"));
}
