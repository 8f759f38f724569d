// Fingerprinting cost on large bodies, JSON parsing excluded (the caller has parsed already).
// Prints a markdown table: median and p99 microseconds per call over N runs and throughput.
//
//   fingerprint_bench [runs=200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/token_key.hpp"
#include "routing/fingerprint.hpp"

namespace {

using nlohmann::json;
using warmslot::routing::fingerprint_request;
using warmslot::routing::request_kind;

constexpr std::size_t one_mib = 1024 * 1024;

// Printable, varied text so nothing about it is special to the hash.
std::string text(std::size_t bytes, unsigned seed) {
    std::string s(bytes, ' ');
    unsigned x = seed * 2654435761u + 1;
    for (auto& c : s) {
        x = x * 1664525u + 1013904223u;
        c = static_cast<char>('a' + (x >> 24) % 26);
    }
    return s;
}

json chat(std::size_t messages, std::size_t total_bytes) {
    json body = {
        {"model", "m"}, {"temperature", 0.7}, {"stream", true}, {"messages", json::array()}};
    body["messages"].push_back({{"role", "system"}, {"content", text(total_bytes / messages, 0)}});
    for (std::size_t i = 1; i < messages; ++i) {
        body["messages"].push_back({{"role", i % 2 == 1 ? "user" : "assistant"},
                                    {"content", text(total_bytes / messages, unsigned(i))}});
    }
    return body;
}

json token_prompt(std::size_t tokens) {
    json ids = json::array();
    for (std::size_t i = 0; i < tokens; ++i) ids.push_back((i * 7919) % 151000);
    return {{"model", "m"}, {"n_predict", 16}, {"prompt", std::move(ids)}};
}

struct bench_case {
    const char* name;
    request_kind kind;
    json body;
    std::size_t payload_bytes;  // text bytes; token ids count 4 bytes each
};

void run(const bench_case& c, int runs) {
    std::vector<double> micros;
    micros.reserve(static_cast<std::size_t>(runs));
    std::size_t levels = 0;
    for (int i = 0; i < runs + 5; ++i) {  // the first 5 warm the caches
        const auto start = std::chrono::steady_clock::now();
        const auto fp = fingerprint_request(c.kind, c.body);
        const auto end = std::chrono::steady_clock::now();
        if (!fp) {
            std::fprintf(stderr, "%s: not fingerprinted\n", c.name);
            std::exit(1);
        }
        levels = fp->levels.size();
        if (i >= 5)
            micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::sort(micros.begin(), micros.end());
    const double median = micros[micros.size() / 2];
    const double p99 = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
    const double mb_per_s = static_cast<double>(c.payload_bytes) / 1e6 / (median / 1e6);
    std::printf("| %s | %zu | %.1f | %.1f | %.0f |\n", c.name, levels, median, p99, mb_per_s);
}

// A prompt's tokens hashed into their block chain (what names a slot file), and the key of the
// whole prompt: the disk tier's own work per request once llama-server has tokenized it.
void run_chain(const char* name, std::size_t tokens, int runs) {
    std::vector<int> ids(tokens);
    for (std::size_t i = 0; i < tokens; ++i) ids[i] = static_cast<int>((i * 7919) % 151000);
    std::vector<double> micros;
    std::size_t blocks = 0;
    for (int i = 0; i < runs + 5; ++i) {
        auto copy = ids;  // the chain takes the tokens as the tier does (moved in)
        const auto start = std::chrono::steady_clock::now();
        const warmslot::cache::token_chain chain("identity", std::move(copy));
        const auto key = chain.key_at(chain.size());
        const auto end = std::chrono::steady_clock::now();
        blocks = chain.blocks().size() + (key.empty() ? 1 : 0);
        if (i >= 5)
            micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::sort(micros.begin(), micros.end());
    const double median = micros[micros.size() / 2];
    const double p99 = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
    const double mb_per_s = static_cast<double>(tokens * 4) / 1e6 / (median / 1e6);
    std::printf("| %s | %zu | %.1f | %.1f | %.0f |\n", name, blocks, median, p99, mb_per_s);
}

}  // namespace

int main(int argc, char** argv) {
    const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
    const std::vector<bench_case> cases = {
        {"1 MiB in one system message", request_kind::chat, chat(1, one_mib), one_mib},
        {"1 MiB in 200 messages", request_kind::chat, chat(200, one_mib), one_mib / 200 * 200},
        {"1 MiB completion prompt string",
         request_kind::completion,
         {{"model", "m"}, {"prompt", text(one_mib, 1)}},
         one_mib},
        {"256K-token id array", request_kind::completion, token_prompt(256 * 1024), 256 * 1024 * 4},
    };
    std::printf("%d runs per case; MB/s = payload (text bytes, 4 B per token id) / median\n\n",
                runs);
    std::printf("| case | levels | median us | p99 us | MB/s |\n|---|---:|---:|---:|---:|\n");
    for (const auto& c : cases) run(c, runs);
    run_chain("20K-token block chain", 20000, runs);
    run_chain("100K-token block chain", 100000, runs);
}
