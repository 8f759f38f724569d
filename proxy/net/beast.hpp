// The one header that brings in Asio and Beast, with the names the I/O layers share.
// Include it only from the I/O modules (http/, upstream/, service/ pipeline, app/): pure logic
// never sees it, and it is expensive to compile.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace warmslot {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;
template <typename T>
using awaitable = boost::asio::awaitable<T>;

// Completion token for coroutines that handle errors as values: `auto [ec, n] = co_await ...`.
inline constexpr auto nothrow = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace warmslot
