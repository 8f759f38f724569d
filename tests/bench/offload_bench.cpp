// What parsing a request body on the compute pool costs against parsing it in place: the hop
// from an I/O thread to a one-thread pool and back (as service/pipeline.cpp makes it, the body
// moved both ways), and what the hop saves the I/O thread: parsing and freeing bodies of a few
// sizes. Prints a markdown table.
//
//   offload_bench [runs=2000]
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/json_parse.hpp"

namespace {

namespace net = boost::asio;
using clock_type = std::chrono::steady_clock;

double cpu_us() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct moved {
    std::string text;
};

net::awaitable<moved> on_pool(std::string text) { co_return moved{std::move(text)}; }

// Median wall time of a round trip to the pool and back, and the process's CPU time per round
// trip beyond that of the same loop without it (a 200 µs pause between requests, so that the
// pool's thread sleeps in between, as it does between requests).
std::pair<double, double> hop(int runs, bool hopping) {
    net::io_context io(1);
    net::thread_pool pool(1);
    std::vector<double> wall;
    double cpu = 0;
    net::co_spawn(
        io,
        [&]() -> net::awaitable<void> {
            std::string body(100000, 'x');
            net::steady_timer pause(io);
            const double start = cpu_us();
            for (int i = 0; i < runs; ++i) {
                const auto a = clock_type::now();
                if (hopping) {
                    auto back = co_await net::co_spawn(
                        pool.get_executor(), on_pool(std::move(body)), net::use_awaitable);
                    body = std::move(back.text);
                }
                wall.push_back(
                    std::chrono::duration<double, std::micro>(clock_type::now() - a).count());
                pause.expires_after(std::chrono::microseconds(200));
                co_await pause.async_wait(net::use_awaitable);
            }
            cpu = (cpu_us() - start) / runs;
        },
        net::detached);
    io.run();
    std::sort(wall.begin(), wall.end());
    return {wall[wall.size() / 2], cpu};
}

std::string chat(std::size_t bytes, std::size_t message_bytes) {
    std::string body = R"({"model":"m","messages":[)";
    for (std::size_t i = 0; body.size() < bytes; ++i) {
        if (i > 0) body += ',';
        body += R"({"role":"user","content":")";
        body += std::string(message_bytes, static_cast<char>('a' + i % 26));
        body += R"("})";
    }
    return body + "]}";
}

std::string token_ids(std::size_t bytes) {
    std::string body = R"({"model":"m","prompt":[)";
    for (std::size_t i = 0; body.size() < bytes; ++i) {
        if (i > 0) body += ',';
        body += std::to_string((i * 7919) % 151000);
    }
    return body + "]}";
}

// Median microseconds to parse `body`, and to free the DOM.
void parse_row(const char* name, const std::string& body, int runs) {
    std::vector<double> parse;
    std::vector<double> release;
    for (int i = 0; i < runs; ++i) {
        const auto a = clock_type::now();
        auto* dom = new nlohmann::json(warmslot::api::parse_json(body));
        const auto b = clock_type::now();
        delete dom;
        const auto c = clock_type::now();
        parse.push_back(std::chrono::duration<double, std::micro>(b - a).count());
        release.push_back(std::chrono::duration<double, std::micro>(c - b).count());
    }
    std::sort(parse.begin(), parse.end());
    std::sort(release.begin(), release.end());
    std::printf("| parse %s | %zu | %.1f | | %.1f |\n", name, body.size(), parse[parse.size() / 2],
                release[release.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
    const int runs = argc > 1 ? std::max(10, std::atoi(argv[1])) : 2000;
    const auto [base_wall, base_cpu] = hop(runs, false);
    const auto [hop_wall, hop_cpu] = hop(runs, true);
    std::printf("%d runs; µs = median per operation (CPU: mean, whole process)\n\n", runs);
    std::printf("| operation | bytes | wall µs | CPU µs | free µs |\n|---|--:|--:|--:|--:|\n");
    std::printf("| hop to the pool and back | | %.1f | %.1f | |\n", hop_wall - base_wall,
                hop_cpu - base_cpu);
    const int big = std::max(3, runs / 500);
    parse_row("chat, 1 KiB messages", chat(64 * 1024, 1024), runs / 4);
    parse_row("chat, 1 KiB messages", chat(64 * 1024 * 1024, 1024), big);
    parse_row("token id array", token_ids(16 * 1024), runs / 4);
    parse_row("token id array", token_ids(64 * 1024), runs / 4);
}
