#include "tier_harness.hpp"

#include <boost/asio/thread_pool.hpp>
#include <random>

#include "app/app.hpp"
#include "component_config.hpp"
#include "http/server.hpp"
#include "monitor/monitor.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "service/pipeline.hpp"
#include "tier/disk_tier.hpp"

namespace warmslot::testing {

using namespace std::chrono_literals;
using nlohmann::json;

http_reply http_call(std::uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body) {
    net::io_context ctx{1};
    beast::tcp_stream stream(ctx);
    http_reply out;
    stream.expires_after(5s);
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "localhost");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    net::co_spawn(
        ctx,
        [&]() -> awaitable<void> {
            auto [ec] = co_await stream.async_connect(
                tcp::endpoint(net::ip::make_address("127.0.0.1"), port), nothrow);
            if (ec) co_return;
            auto [wec, w] = co_await http::async_write(stream, req, nothrow);
            if (wec) co_return;
            beast::flat_buffer buffer;
            http::response<http::string_body> res;
            auto [rec, r] = co_await http::async_read(stream, buffer, res, nothrow);
            if (rec) co_return;
            out.status = res.result_int();
            for (const auto& f : res) {
                std::string name(f.name_string());
                for (auto& c : name)
                    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                out.headers[name] = std::string(f.value());
            }
            out.body = std::move(res.body());
        },
        net::detached);
    ctx.run();
    return out;
}

temp_dir::temp_dir(const std::filesystem::path& base) {
    std::random_device rd;
    path = base / ("warmslot-tier-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
}

temp_dir::~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
}

config::config tier_config(std::vector<config::backend> backends, const std::string& cache_dir) {
    config::config c = component_config(std::move(backends));
    c.routing.reconcile_interval = 100ms;
    c.routing.max_wait = 3s;
    c.cache.dir = cache_dir;
    c.cache.min_prefix_tokens = 256;
    c.cache.slot_call_timeout = 2s;
    return c;
}

config::backend backend_for(const std::string& name, const fake_llama& fake) {
    config::backend b;
    b.name = name;
    b.url = "http://127.0.0.1:" + std::to_string(fake.port());
    b.host = "127.0.0.1";
    b.port = fake.port();
    b.slot_save_path = fake.options().slot_dir;
    return b;
}

namespace {

// A one-thread pool whose pending work can be destroyed before the other parts (app.cpp's).
class one_thread : public net::thread_pool {
  public:
    one_thread() : net::thread_pool(1) {}
    using net::execution_context::shutdown;
};

}  // namespace

// In app.cpp's construction order.
struct tier_proxy::parts {
    explicit parts(config::config c)
        : src(std::move(c)),
          workers(2),
          registry(app::backend_names(*src.current()),
                   app::planner_settings(src.current()->routing)),
          monitor(src, registry, workers.context(0).get_executor()),
          disk(src, registry, index_thread.get_executor(), file_thread.get_executor()),
          pipeline(src, workers, registry, &disk),
          server(
              src, workers, [this](http_server::exchange& ex) { return pipeline.handle(ex); },
              [this](const http::request_header<>& head) { return pipeline.admits(head); }) {}

    config::source src;
    http_server::workers workers;
    one_thread index_thread;
    one_thread file_thread;
    routing::registry registry;
    monitoring::monitor monitor;
    tier::disk_tier disk;
    service::pipeline pipeline;
    http_server::server server;
};

void tier_proxy::publish(config::config next) {
    p_->src.publish(std::make_shared<const config::config>(std::move(next)));
}

tier_proxy::tier_proxy(config::config cfg) : p_(std::make_unique<parts>(std::move(cfg))) {
    p_->server.listen();
    p_->monitor.start();
    p_->workers.start();
}

tier_proxy::~tier_proxy() {
    p_->monitor.stop();
    p_->server.stop(2s);  // drains, then stops the workers
    p_->workers.join();
    p_->index_thread.join();
    p_->file_thread.join();
    p_->workers.shutdown();
    p_->index_thread.shutdown();
    p_->file_thread.shutdown();
}

std::uint16_t tier_proxy::port() const { return p_->server.port(); }

http_reply tier_proxy::post(const std::string& target, const json& body) const {
    return http_call(port(), "POST", target, body.dump());
}

json tier_proxy::status() const {
    const auto r = http_call(port(), "GET", "/warmslot/status");
    return json::parse(r.body, nullptr, false);
}

std::string tier_proxy::metrics() const { return http_call(port(), "GET", "/metrics").body; }

std::map<std::string, json> tier_proxy::indexed_files() const {
    std::map<std::string, json> out;
    const auto s = status();
    if (!s.is_object() || !s.contains("disk")) return out;
    for (const auto& d : s["disk"]["dirs"]) out[d.value("dir", "")] = d["files"];
    return out;
}

std::uint64_t tier_proxy::believed_tokens(int backend, int slot) const {
    const auto s = status();
    const auto& t = s["backends"][static_cast<std::size_t>(backend)]["slots"]
                     [static_cast<std::size_t>(slot)]["tokens"];
    return t.is_number_unsigned() ? t.get<std::uint64_t>() : 0;
}

bool tier_proxy::ready(int backend) const {
    const auto s = status();
    if (!s.is_object() || !s.contains("backends")) return false;
    const auto& b = s["backends"][static_cast<std::size_t>(backend)];
    return b.value("healthy", false) && b.value("routing", false);
}

json chat_body(const std::string& doc, const std::string& question, bool stream) {
    json body = {
        {"messages",
         {{{"role", "system"}, {"content", doc}}, {{"role", "user"}, {"content", question}}}},
        {"max_tokens", 2}};
    if (stream) body["stream"] = true;
    return body;
}

std::string document(int seed, std::size_t n) {
    std::string out;
    for (int line = 0; out.size() < n; ++line) {
        out += "Document " + std::to_string(seed) + ", line " + std::to_string(line) +
               ": the quick brown fox jumps over the lazy dog.\n";
    }
    out.resize(n);
    return out;
}

std::vector<int> prompt_tokens(const json& body) {
    std::string text;
    for (const auto& m : body["messages"]) {
        text +=
            "<|im_start|>" + m.value("role", "") + "\n" + m.value("content", "") + "<|im_end|>\n";
    }
    text += "<|im_start|>assistant\n";
    return fake_tokenize(text, true, true);
}

}  // namespace warmslot::testing
