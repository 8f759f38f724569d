#include "app/supervisor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>

#include "util/log.hpp"

namespace warmslot::app {
namespace {

using routing::clock;
constexpr auto tick_interval = std::chrono::milliseconds(200);
constexpr auto stop_grace = std::chrono::milliseconds(10'000);
constexpr auto stable_run = std::chrono::seconds(60);  // a run this long resets the backoff

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("warmslot");
    return logger;
}

// The pause before the next start after `failures` short runs: 1 s, 2 s, 4 s ... up to `max`.
clock::duration backoff(int failures, config::millis max) {
    return std::min<clock::duration>(std::chrono::seconds(1) * (1 << std::min(failures, 10)), max);
}

}  // namespace

void assign_ports(config::config& cfg) {
    for (auto& b : cfg.backends) {
        if (!b.supervised() || b.port != 0) continue;
        b.host = "127.0.0.1";
        b.port = pick_free_loopback_port();
        b.url = "http://127.0.0.1:" + std::to_string(b.port);
        b.child_key = random_child_key();
    }
}

struct supervisor::child {
    std::unique_ptr<process> proc;
    bool wanted = false;    // should be running: start always, or woken by a request
    bool decided = false;   // `wanted` was set from the config once
    bool stopping = false;  // being saved and stopped
    int failures = 0;       // consecutive short runs (backoff)
    clock::time_point started{}, next_start{}, last_use{};
};

supervisor::supervisor(const config::source& src, routing::registry& reg,
                       net::any_io_executor ex, save_fn save)
    : src_(src), reg_(reg), ex_(std::move(ex)), save_(std::move(save)) {}

supervisor::~supervisor() = default;

supervisor::child& supervisor::child_of(std::size_t backend) {
    while (children_.size() <= backend) children_.push_back(std::make_unique<child>());
    return *children_[backend];
}

void supervisor::start() { net::co_spawn(ex_, loop(), net::detached); }

void supervisor::sync() {
    net::post(ex_, [this] { tick(*src_.current(), clock::now()); });
}

awaitable<void> supervisor::loop() {
    net::steady_timer timer(ex_);
    while (!stopping_) {
        tick(*src_.current(), clock::now());
        timer.expires_after(tick_interval);
        co_await timer.async_wait(nothrow);
    }
}

// One look at every supervised backend: reap, restart, stop when idle or retired, start.
void supervisor::tick(const config::config& cfg, clock::time_point now) {
    if (stopping_) return;
    const auto views = reg_.snapshot();
    // Stops start after the lock is released: co_spawn may run save_and_stop inline up to its
    // first suspension, and save_and_stop takes the lock.
    std::vector<std::pair<int, const char*>> stops;
    std::unique_lock lock(mu_);
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (!b.supervised()) continue;
        auto& c = child_of(i);
        const int idx = static_cast<int>(i);
        if (!c.decided) {
            c.decided = true;
            c.wanted = c.wanted || b.start == config::start_mode::always;
        }
        if (c.stopping) continue;
        if (c.proc) {
            if (auto ended = c.proc->poll()) {
                const bool short_run = now - c.started < stable_run;
                c.failures = short_run ? c.failures + 1 : 0;
                c.next_start = now + (c.failures == 0 ? clock::duration::zero()
                                                      : backoff(c.failures, b.restart_backoff_max));
                log()->warn("backend {}: llama-server (pid {}) {}; restarting in {} ms", b.name,
                            c.proc->pid(), ended->describe(),
                            std::chrono::duration_cast<std::chrono::milliseconds>(c.next_start - now).count());
                c.proc.reset();
                reg_.set_stopped(idx, true);
                reg_.forget_all(idx);  // a new process holds nothing
            }
        }
        const std::size_t in_flight = i < views.size() ? views[i].in_flight : 0;
        if (in_flight > 0) c.last_use = now;  // idle time counts from the end of the last request
        if (c.proc && b.retired) {
            c.stopping = true;
            stops.emplace_back(idx, "removed from the config");
            continue;
        }
        if (c.proc && b.idle_stop.count() > 0 && in_flight == 0 && now - c.last_use > b.idle_stop) {
            c.wanted = false;
            c.stopping = true;
            stops.emplace_back(idx, "idle");
            continue;
        }
        if (!c.proc && c.wanted && !b.retired && now >= c.next_start) launch(idx, b, c);
    }
    lock.unlock();
    for (const auto& [idx, why] : stops) net::co_spawn(ex_, save_and_stop(idx, why), net::detached);
}

void supervisor::launch(int index, const config::backend& b, child& c) {
    const auto now = clock::now();
    process_options opts;
    opts.argv = supervised_argv(b);
    opts.guard = self_guard();  // a SIGKILLed warmslot leaves no llama-server behind
    // warmslot's API keys and other secrets stay here: only the allow-list and `env` pass.
    opts.env = supervised_env(b, current_environment(), env_names_ignore_case());
    try {
        if (!b.slot_save_path.empty()) std::filesystem::create_directories(b.slot_save_path);
        const auto dir = src_.current()->cache.dir;
        if (!dir.empty()) {
            const auto logs = std::filesystem::path(dir) / "logs";
            std::filesystem::create_directories(logs);
            opts.log_path = (logs / (b.name + ".log")).string();
        }
        c.proc = start_process(opts);
        c.started = c.last_use = now;
        reg_.set_stopped(index, false);  // healthy again once the monitor sees it answer
        log()->info("backend {}: started llama-server (pid {}) on {}{}", b.name, c.proc->pid(),
                    b.url, opts.log_path.empty() ? "" : ", log " + opts.log_path);
    } catch (const std::exception& e) {
        c.failures += 1;
        c.next_start = now + backoff(c.failures, b.restart_backoff_max);
        log()->error("backend {}: cannot start {}: {}", b.name, opts.argv.front(), e.what());
    }
}

// Waits for the backend's requests to finish (within the shutdown grace), saves its valuable
// slots while it still runs, then stops the process.
awaitable<void> supervisor::save_and_stop(int backend, const char* why) {
    const auto cfg = src_.current();
    const auto& b = cfg->backends[static_cast<std::size_t>(backend)];
    net::steady_timer timer(ex_);
    const auto deadline = clock::now() + cfg->timeouts.shutdown_grace;
    while (clock::now() < deadline) {
        const auto views = reg_.snapshot();
        if (views[static_cast<std::size_t>(backend)].in_flight == 0) break;
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
    if (save_) {
        try {
            co_await save_(backend);
        } catch (const std::exception& e) {
            log()->warn("backend {}: saving slots before the stop failed: {}", b.name, e.what());
        }
    }
    std::unique_ptr<process> proc;
    {
        std::lock_guard lock(mu_);
        proc = std::move(child_of(static_cast<std::size_t>(backend)).proc);
    }
    reg_.set_stopped(backend, true);  // no new plans; the monitor cannot revive it meanwhile
    if (proc) {
        const auto ended = proc->terminate(stop_grace);
        log()->info("backend {}: stopped llama-server (pid {}, {}): {}", b.name, proc->pid(), why,
                    ended.describe());
    }
    reg_.forget_all(backend);
    std::lock_guard lock(mu_);
    child_of(static_cast<std::size_t>(backend)).stopping = false;
}

awaitable<void> supervisor::stop_all() {
    stopping_ = true;
    std::vector<int> running;
    {
        std::lock_guard lock(mu_);
        for (std::size_t i = 0; i < children_.size(); ++i) {
            if (children_[i]->proc && !children_[i]->stopping) {
                children_[i]->stopping = true;
                running.push_back(static_cast<int>(i));
            }
        }
    }
    for (int i : running) co_await save_and_stop(i, "warmslot is stopping");
}

void supervisor::used(int backend) {
    std::lock_guard lock(mu_);
    child_of(static_cast<std::size_t>(backend)).last_use = clock::now();
}

// Runs on the request's worker: marks the matching stopped backends wanted, asks the loop to
// look now, and polls the registry until one is healthy.
awaitable<void> supervisor::wake(const config::config& cfg, std::string model) {
    const bool any = std::any_of(cfg.backends.begin(), cfg.backends.end(),
                                 [](const config::backend& b) { return b.supervised() && !b.retired; });
    if (!any) co_return;
    const auto views = reg_.snapshot();
    std::vector<std::size_t> waiting;
    clock::duration limit{};
    for (std::size_t i = 0; i < cfg.backends.size() && i < views.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (b.retired) continue;
        if (views[i].healthy && (model.empty() || routing::serves(views[i], model))) co_return;
        const bool named = model.empty() || b.models.empty() ||
                           std::find(b.models.begin(), b.models.end(), model) != b.models.end();
        if (!b.supervised() || !named) continue;
        waiting.push_back(i);
        limit = std::max<clock::duration>(limit, b.start_timeout);
    }
    if (waiting.empty()) co_return;
    {
        std::lock_guard lock(mu_);
        for (auto i : waiting) {
            auto& c = child_of(i);
            c.wanted = true;
            c.last_use = clock::now();
        }
    }
    sync();
    net::steady_timer timer(co_await net::this_coro::executor);
    const auto deadline = clock::now() + limit;
    while (clock::now() < deadline) {
        const auto now_views = reg_.snapshot();
        for (auto i : waiting) {
            if (i < now_views.size() && now_views[i].healthy) co_return;
        }
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
}

}  // namespace warmslot::app
