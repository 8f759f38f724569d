// warmslot's own calls to a backend (upstream::call): a call that timed out is never sent
// again, even on a kept-alive connection (a slot save or restore must not run twice).
#include <doctest/doctest.h>

#include <chrono>

#include "stub_upstream.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot {
namespace {

using namespace std::chrono_literals;

TEST_CASE("a slot call that timed out on a pooled connection is not sent twice") {
    testing::stub_upstream stub;
    config::backend b;
    b.name = "stub";
    b.host = "127.0.0.1";
    b.port = stub.port();
    b.url = "http://127.0.0.1:" + std::to_string(b.port);
    net::io_context io;
    upstream::pool pool(io.get_executor());
    upstream::reply warm, save;
    const std::string target = "/slots/0?action=save&stub=silent";
    net::co_spawn(
        io,
        [&]() -> awaitable<void> {
            // The first call leaves a kept-alive connection in the pool; the save reuses it.
            warm = co_await upstream::call(pool, b, http::verb::get, "/props", "", 5000ms);
            save = co_await upstream::call(pool, b, http::verb::post, target,
                                           R"({"filename":"x.bin"})", 300ms);
        },
        net::detached);
    io.run();
    CHECK(warm.status == 200);
    CHECK(save.ec == beast::error::timeout);
    const auto seen = stub.seen();
    int saves = 0;
    for (const auto& r : seen.requests) saves += r.target == target ? 1 : 0;
    CHECK(saves == 1);
    CHECK(seen.connections_accepted == 1);  // no new connection was opened to send it again
}

}  // namespace
}  // namespace warmslot
