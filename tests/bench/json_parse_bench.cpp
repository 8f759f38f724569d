// Parsing request bodies: api::parse_json against nlohmann::json::parse on the same texts.
// Prints a markdown table: median nanoseconds per parse (each sample times a batch of parses,
// the resulting DOM destroyed included) and parse_json's throughput.
//
//   json_parse_bench [runs=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/json_parse.hpp"

namespace {

using nlohmann::json;

constexpr std::size_t one_mib = 1024 * 1024;

// Varied text from `alphabet` so nothing about it is special to the parsers.
std::string text(std::size_t bytes, unsigned seed, const std::vector<std::string>& alphabet) {
    std::string s;
    s.reserve(bytes + 8);
    unsigned x = seed * 2654435761u + 1;
    while (s.size() < bytes) {
        x = x * 1664525u + 1013904223u;
        s += alphabet[(x >> 24) % alphabet.size()];
    }
    return s;
}

const std::vector<std::string> ascii = {"a", "b", "e", "o", "s", "t", " ", ".", "x", "y"};
const std::vector<std::string> cyrillic = {"\xD0\xB0", "\xD0\xB1", "\xD0\xB2", "\xD1\x8F", " "};

std::string chat(std::size_t messages, std::size_t total_bytes,
                 const std::vector<std::string>& alphabet, bool ensure_ascii) {
    json body = {
        {"model", "m"}, {"temperature", 0.7}, {"stream", true}, {"messages", json::array()}};
    for (std::size_t i = 0; i < messages; ++i) {
        const char* role = i == 0 ? "system" : i % 2 == 1 ? "user" : "assistant";
        body["messages"].push_back(
            {{"role", role}, {"content", text(total_bytes / messages, unsigned(i), alphabet)}});
    }
    return body.dump(-1, ' ', ensure_ascii);
}

std::string token_prompt(std::size_t tokens) {
    json ids = json::array();
    for (std::size_t i = 0; i < tokens; ++i) ids.push_back((i * 7919) % 151000);
    return json{{"model", "m"}, {"n_predict", 16}, {"prompt", std::move(ids)}}.dump();
}

struct bench_case {
    const char* name;
    std::string body;
};

// Median nanoseconds per call of `parse` on `body`, batches sized to about a millisecond.
double median_ns(const std::function<json(std::string_view)>& parse, const std::string& body,
                 int runs) {
    const std::size_t batch = std::max<std::size_t>(1, 200'000 / (body.size() + 1));
    std::vector<double> samples;
    for (int i = 0; i < runs + 3; ++i) {  // the first 3 warm the caches
        const auto start = std::chrono::steady_clock::now();
        for (std::size_t b = 0; b < batch; ++b) {
            if (parse(body).is_discarded()) std::abort();
        }
        const auto end = std::chrono::steady_clock::now();
        if (i >= 3) {
            samples.push_back(std::chrono::duration<double, std::nano>(end - start).count() /
                              static_cast<double>(batch));
        }
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

void run(const bench_case& c, int runs) {
    if (warmslot::api::parse_json(c.body) != json::parse(c.body, nullptr, false)) {
        std::fprintf(stderr, "%s: parse_json differs from nlohmann\n", c.name);
        std::exit(1);
    }
    const double theirs =
        median_ns([](std::string_view t) { return json::parse(t, nullptr, false); }, c.body, runs);
    const double ours = median_ns(warmslot::api::parse_json, c.body, runs);
    const double mb_per_s = static_cast<double>(c.body.size()) / 1e6 / (ours / 1e9);
    std::printf("| %s | %zu | %.0f | %.0f | %.1fx | %.0f |\n", c.name, c.body.size(), theirs, ours,
                theirs / ours, mb_per_s);
}

}  // namespace

int main(int argc, char** argv) {
    const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
    const std::vector<bench_case> cases = {
        {"small chat request",
         R"({"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},)"
         R"({"role":"user","content":"Say hello to user #0000000042."}],"max_tokens":16,"stream":false})"},
        {"1 MiB in one system message", chat(1, one_mib, ascii, false)},
        {"1 MiB in 200 messages", chat(200, one_mib, ascii, false)},
        {"1 MiB Cyrillic, raw UTF-8", chat(1, one_mib, cyrillic, false)},
        {"1 MiB Cyrillic, \\u escapes", chat(1, one_mib, cyrillic, true)},
        {"256K-token id array", token_prompt(256 * 1024)},
    };
    std::printf("%d runs per case; ns = median per parse, DOM destruction included\n\n", runs);
    std::printf("| body | bytes | nlohmann ns | parse_json ns | speed-up | parse_json MB/s |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const auto& c : cases) run(c, runs);
}
