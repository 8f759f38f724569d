// bench_body: the client of the body-memory benchmark (tests/bench/body_memory.sh). Sends one
// large chat completion request and reads its whole answer.
//
//   bench_body --url http://HOST:PORT[/path] --bytes N --shape system|messages
//
// The body is a chat request of at most N bytes (exactly N, give or take the last line or
// message), sent with Content-Length in one write:
//   system    one system message holding a document of ~100-byte lines (each ending in an
//             escaped newline, as a JSON client writes a text file), then a short user message;
//   messages  a conversation of user and assistant messages of ~1 KiB each.
// Prints one line: `status=S bytes=B route=R` (R: the X-Warmslot-Route header, "-" if none).
// Exits 1 when the request could not be made; any HTTP status is printed, not judged.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

struct options {
    std::string host;
    std::string port;
    std::string path = "/v1/chat/completions";
    std::size_t bytes = 0;
    std::string shape = "system";
};

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr,
                 "bench_body: %s\nusage: bench_body --url http://HOST:PORT[/path] --bytes N "
                 "--shape system|messages\n",
                 problem.c_str());
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; i += 2) {
        const std::string_view a = argv[i];
        if (i + 1 >= argc) usage(std::string(a) + " wants a value");
        const std::string v = argv[i + 1];
        if (a == "--url") {
            const std::string scheme = "http://";
            const auto colon = v.find(':', scheme.size());
            const auto slash = v.find('/', scheme.size());
            if (v.rfind(scheme, 0) != 0 || colon == std::string::npos) usage("bad --url " + v);
            o.host = v.substr(scheme.size(), colon - scheme.size());
            o.port = v.substr(colon + 1, slash == std::string::npos ? slash : slash - colon - 1);
            if (slash != std::string::npos) o.path = v.substr(slash);
        } else if (a == "--bytes") {
            o.bytes = std::strtoull(v.c_str(), nullptr, 10);
        } else if (a == "--shape") {
            o.shape = v;
        } else {
            usage("unknown option " + std::string(a));
        }
    }
    if (o.host.empty()) usage("--url is required");
    if (o.bytes < 4096) usage("--bytes wants at least 4096");
    if (o.shape != "system" && o.shape != "messages") usage("--shape is system or messages");
    return o;
}

// Varied lowercase words, `n` bytes of them (a line of text without any byte JSON escapes).
void words(std::string& out, std::size_t n, unsigned& x) {
    const std::size_t end = out.size() + n;
    while (out.size() < end) {
        x = x * 1664525u + 1013904223u;
        const std::size_t len = 2 + (x >> 28) % 8;
        for (std::size_t i = 0; i < len && out.size() < end; ++i)
            out += static_cast<char>('a' + (x >> (i * 3)) % 26);
        if (out.size() < end) out += ' ';
    }
}

std::string body_of(const options& o) {
    const std::string head = R"({"model":"bench","max_tokens":8,"stream":false,"messages":[)";
    const std::string tail = "]}";
    std::string body = head;
    body.reserve(o.bytes + 2048);
    unsigned x = 12345;
    if (o.shape == "system") {
        const std::string user = R"("},{"role":"user","content":"Summarize the document."})";
        body += R"({"role":"system","content":")";
        while (body.size() + 100 + user.size() + tail.size() <= o.bytes) {
            words(body, 98, x);
            body += "\\n";
        }
        body += user;
    } else {
        bool user = true;
        while (body.size() + 1100 + tail.size() <= o.bytes) {
            if (body.size() > head.size()) body += ',';
            body += user ? R"({"role":"user","content":")" : R"({"role":"assistant","content":")";
            words(body, 1024, x);
            body += R"("})";
            user = !user;
        }
    }
    body += tail;
    return body;
}

}  // namespace

int main(int argc, char** argv) {
    const options o = parse(argc, argv);
    try {
        const std::string body = body_of(o);
        net::io_context ctx;
        tcp::socket socket(ctx);
        net::connect(socket, tcp::resolver(ctx).resolve(o.host, o.port));
        const std::string head =
            "POST " + o.path + " HTTP/1.1\r\nHost: " + o.host + ":" + o.port +
            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\nConnection: close\r\n\r\n";
        const std::array<net::const_buffer, 2> request{net::buffer(head), net::buffer(body)};
        net::write(socket, request);
        boost::beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(64 * 1024 * 1024);
        http::read(socket, buffer, parser);
        const auto& res = parser.get();
        const auto route = res["X-Warmslot-Route"];
        std::printf("status=%u bytes=%zu route=%s\n", res.result_int(), body.size(),
                    route.empty() ? "-" : std::string(route.substr(0, route.find(';'))).c_str());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_body: %s\n", e.what());
        return 1;
    }
}
