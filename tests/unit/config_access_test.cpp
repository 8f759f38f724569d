// api_keys and http: who may call warmslot. Roles, tenants and http settings are tested with
// the access checks that use them (access_test.cpp).
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config_fixtures.hpp"

namespace cfg = warmslot::config;
using warmslot::test::bad_case;
using warmslot::test::contains;
using warmslot::test::one_backend;

namespace {

cfg::config parse(std::string_view yaml) { return warmslot::test::parse_with_fake_env(yaml); }

void check_rejected(const bad_case& c) { warmslot::test::check_rejected_keeping_secrets(c); }

}  // namespace

TEST_CASE("config: api_keys are validated without revealing them") {
    const bad_case cases[] = {
        {"api_keys: sk-live-0123456789\n", "api_keys", 1, "expected a list of keys"},
        {"api_keys:\n  - short7!\n", "api_keys[0]", 2, "key is too short (at least 8"},
        {"api_keys:\n  - ${WS_MISSING}\n", "api_keys[0]", 2,
         "environment variable WS_MISSING is not set"},
        {"api_keys:\n  - ${WS_EMPTY}\n", "api_keys[0]", 2,
         "environment variable WS_EMPTY is empty"},
        {"api_keys:\n  - ${WS_SHORT}\n", "api_keys[0]", 2,
         "key from environment variable WS_SHORT is too short"},
        {"api_keys:\n  - ${WS_SPACE}\n", "api_keys[0]", 2, "must not contain spaces"},
        {"api_keys:\n  - \"sk live 0123\"\n", "api_keys[0]", 2, "must not contain spaces"},
        {"api_keys:\n  - ${WS_KEY\n", "api_keys[0]", 2, "malformed environment reference"},
        {"api_keys:\n  - prefix-${WS_KEY}\n", "api_keys[0]", 2, "malformed environment"},
        {"api_keys:\n  - ${1BAD}\n", "api_keys[0]", 2, "malformed environment"},
        {"api_keys:\n  - ${WS_KEY}\n  - sk-live-0123456789\n", "api_keys[1]", 3,
         "same key as api_keys[0]"},
        {"api_keys:\n  - [sk-live-0123456789]\n", "api_keys[0]", 2, "expected a string, found"},
    };
    for (const bad_case& c : cases) check_rejected(c);

    // The literal keys from the file must not leak either.
    for (std::string_view yaml :
         {"api_keys:\n  - short7!\n", "api_keys:\n  - \"sk live 0123\"\n"}) {
        try {
            parse(yaml);
            FAIL("accepted a bad key");
        } catch (const cfg::config_error& e) {
            CHECK_FALSE(contains(e.what(), "short7!"));
            CHECK_FALSE(contains(e.what(), "sk live"));
        }
    }
}

TEST_CASE("config: http's unknown keys name the keys it knows") {
    const std::string head = std::string(one_backend) + "http:\n";  // http: is line 4
    const bad_case cases[] = {
        {head + "  allowed_host: [a]\n", "http.allowed_host", 5,
         "unknown key; expected one of: allowed_hosts, cors_origins"},
        {head + "  cors_origins: []\n  cors: []\n", "http.cors", 6, "unknown key"},
        {head + "  - a\n", "http", 5, "expected a map, found a list"},
    };
    for (const bad_case& c : cases) check_rejected(c);
}
