// What the header checks of every request cost (service/gate.cpp, over api/access and
// util/secrets): classify, the Host allow-list, the key among `keys` configured keys (every one
// compared in full), the role and the Content-Type rule, and the access line's escaping of the
// target. Prints the median nanoseconds per request over batches.
//
//   access_bench [keys=16] [runs=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/access.hpp"
#include "api/endpoints.hpp"
#include "util/escape.hpp"
#include "util/secrets.hpp"

namespace {

namespace api = warmslot::api;

volatile std::size_t sink = 0;  // keeps the work from being optimised away

std::size_t check_once(const std::vector<std::string>& keys,
                       const std::vector<warmslot::config::key_grant>& grants,
                       const std::string& given) {
    const std::vector<std::string> hosts;
    const auto ep = api::classify("POST", "/v1/chat/completions");
    std::size_t r = api::host_allowed("127.0.0.1:8080", hosts, false, "127.0.0.1") ? 1 : 0;
    const auto i = warmslot::util::matching_key(given, keys);
    if (i < grants.size()) r += api::permits(grants[i].role, ep, "/v1/chat/completions") ? 2 : 0;
    r += api::json_content_type("application/json") ? 4 : 0;
    r += warmslot::util::escape_controls("/v1/chat/completions").size();
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t n_keys = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 16;
    const int runs = argc > 2 ? std::atoi(argv[2]) : 50;
    std::vector<std::string> keys;
    std::vector<warmslot::config::key_grant> grants;
    for (std::size_t k = 0; k < n_keys; ++k) {
        keys.push_back("ws-" + std::string(45, static_cast<char>('a' + k % 26)) +
                       std::to_string(k));
        grants.push_back({warmslot::config::key_role::client, "tenant-" + std::to_string(k)});
    }
    const std::string given = keys.empty() ? std::string("none") : keys.back();  // the last one
    constexpr int batch = 10000;
    std::vector<double> samples;
    for (int r = 0; r < runs; ++r) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < batch; ++i) sink = sink + check_once(keys, grants, given);
        const std::chrono::duration<double, std::nano> took =
            std::chrono::steady_clock::now() - start;
        samples.push_back(took.count() / batch);
    }
    std::sort(samples.begin(), samples.end());
    std::printf("| keys | median ns per request | p90 |\n|---|---|---|\n| %zu | %.0f | %.0f |\n",
                n_keys, samples[samples.size() / 2], samples[samples.size() * 9 / 10]);
    return 0;
}
