#include "app/supervisor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app/supervisor_child.hpp"
#include "util/log.hpp"

namespace warmslot::app {
namespace {

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

void assign_addresses(config::config& cfg, const std::string& socket_dir) {
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        auto& b = cfg.backends[i];
        if (!b.supervised() || b.child_key) continue;
        if (!socket_dir.empty()) {
            // By index: a reload appends backends, so an index names one backend for good.
            b.host = socket_dir + "/" + std::to_string(i) + ".sock";
            b.port = 0;
            b.url = "unix:" + b.host;
        } else {
            b.host = "127.0.0.1";
            b.port = pick_free_loopback_port();
            b.url = "http://127.0.0.1:" + std::to_string(b.port);
        }
        b.child_key = std::make_shared<config::child_secret>();
    }
}

supervisor::supervisor(const config::source& src, routing::registry& reg, net::any_io_executor ex,
                       save_fn save)
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

// One look at every supervised backend: reap, restart, stop when idle or retired, start; then
// the swap groups' decisions.
void supervisor::tick(const config::config& cfg, clock::time_point now) {
    if (stopping_) return;
    const auto views = reg_.snapshot();
    // Stops start after the lock is released: co_spawn may run save_and_stop inline up to its
    // first suspension, and save_and_stop takes the lock.
    stop_list stops;
    std::unique_lock lock(mu_);
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (!b.supervised()) continue;
        auto& c = child_of(i);
        const int idx = static_cast<int>(i);
        const auto group = b.retired ? std::nullopt : group_of(cfg, b.name);
        if (!c.decided) {
            c.decided = true;
            c.wanted = c.wanted || (b.start == config::start_mode::always && !group);
        }
        if (c.stopping) continue;
        if (c.proc) reap(b, idx, c, now);
        const std::size_t in_flight = i < views.size() ? views[i].in_flight : 0;
        // Idle time counts from the end of the last request.
        if (in_flight > 0 || c.admitted->load() > 0) c.last_use = now;
        if (c.proc && !c.healthy_seen && i < views.size() && views[i].healthy) {
            c.healthy_seen = true;
            c.healthy_at = c.last_use = now;  // idle time counts from when it can serve
            if (c.time_start)
                totals_.start_seconds += std::chrono::duration<double>(now - c.started).count();
            c.time_start = false;
        }
        if (c.proc && b.retired) {
            c.stopping = true;
            stops.emplace_back(idx, "removed from the config");
            continue;
        }
        if (c.proc && group && !c.healthy_seen && now - c.started > b.start_timeout) {
            c.start_failures += 1;
            totals_.failed_starts += 1;
            c.last_failure = fmt::format(
                "llama-server did not turn healthy within start_timeout ({} s)",
                std::chrono::duration_cast<std::chrono::seconds>(b.start_timeout).count());
            c.wanted = false;
            c.stopping = true;
            stops.emplace_back(idx, "it did not turn healthy in time");
            continue;
        }
        const bool home = group && cfg.swap_groups[*group].home == b.name;
        // A process still loading (within its start_timeout) is not idle: the request that
        // woke it waits for it.
        const bool loading = !c.healthy_seen && now - c.started <= b.start_timeout;
        if (c.proc && !loading && !home && b.idle_stop.count() > 0 && in_flight == 0 &&
            c.admitted->load() == 0 && now - c.last_use > b.idle_stop) {
            c.wanted = false;
            c.stopping = true;
            stops.emplace_back(idx, "idle");
            continue;
        }
        // A member of a swap group starts only when its group decides so (tick_groups).
        if (!group && !c.proc && c.wanted && !b.retired && now >= c.next_start) launch(idx, b, c);
    }
    tick_groups(cfg, views, now, stops);
    lock.unlock();
    for (auto& [idx, why] : stops)
        net::co_spawn(ex_, save_and_stop(idx, std::move(why)), net::detached);
}

// A process that exited: restarted after a pause (a member of a swap group only when its
// group starts it again). One that never turned healthy is a failed start: the requests
// waiting for it are told so.
void supervisor::reap(const config::backend& b, int index, child& c, clock::time_point now) {
    const auto ended = c.proc->poll();
    if (!ended) return;
    const bool short_run = now - c.started < stable_run;
    c.failures = short_run ? c.failures + 1 : 0;
    c.next_start = now + (c.failures == 0 ? clock::duration::zero()
                                          : backoff(c.failures, b.restart_backoff_max));
    log()->warn("backend {}: llama-server (pid {}) {}; restarting in {} ms", b.name, c.proc->pid(),
                ended->describe(),
                std::chrono::duration_cast<std::chrono::milliseconds>(c.next_start - now).count());
    if (!c.healthy_seen) {
        c.start_failures += 1;
        totals_.failed_starts += 1;
        c.last_failure = "llama-server " + ended->describe() + " before it turned healthy";
    }
    c.proc.reset();
    c.healthy_seen = false;
    c.time_start = c.time_restore = false;
    reg_.set_stopped(index, true);
    reg_.forget_all(index);  // a new process holds nothing
}

void supervisor::launch(int index, const config::backend& b, child& c) {
    const auto now = clock::now();
    process_options opts;
    opts.argv = supervised_argv(b, src_.current()->cache.isolated());
    opts.guard = self_guard();  // a SIGKILLed warmslot leaves no llama-server behind
    // A key of its own for each start: one the previous process (or whatever read it there)
    // knew is worth nothing to the new one. Calls made from now on send it.
    std::string key = random_child_key();
    // warmslot's API keys and other secrets stay here: only the allow-list and `env` pass.
    opts.env = supervised_env(b, current_environment(), env_names_ignore_case(), key);
    if (b.child_key) b.child_key->set(std::move(key));
    try {
        if (b.host.starts_with('/')) {
            // Only warmslot's user can bind a socket in its directory: checked before every
            // start, since the key goes to whatever listens there.
            const auto dir = std::filesystem::path(b.host).parent_path().string();
            std::string why;
            if (!is_private_dir(dir, why))
                throw std::runtime_error("the sockets' directory " + dir +
                                         " is not private: " + why);
            remove_file(b.host);  // a socket the previous process left
        }
        if (!b.slot_save_path.empty()) std::filesystem::create_directories(b.slot_save_path);
        const auto dir = src_.current()->cache.dir;
        if (!dir.empty()) {
            const auto logs = std::filesystem::path(dir) / "logs";
            std::filesystem::create_directories(logs);
            opts.log_path = (logs / (b.name + ".log")).string();
        }
        c.proc = start_process(opts);
        c.started = c.last_use = now;
        c.healthy_seen = false;
        reg_.set_stopped(index, false);  // healthy again once the monitor sees it answer
        log()->info("backend {}: started llama-server (pid {}) on {}{}", b.name, c.proc->pid(),
                    b.url, opts.log_path.empty() ? "" : ", log " + opts.log_path);
    } catch (const std::exception& e) {
        c.failures += 1;
        c.start_failures += 1;
        totals_.failed_starts += 1;
        c.last_failure = std::string("cannot start ") + opts.argv.front() + ": " + e.what();
        c.next_start = now + backoff(c.failures, b.restart_backoff_max);
        log()->error("backend {}: cannot start {}: {}", b.name, opts.argv.front(), e.what());
    }
}

// Waits for the backend's requests to finish (within the shutdown grace), saves its valuable
// slots while it still runs, then stops the process.
awaitable<void> supervisor::save_and_stop(int backend, std::string why) {
    const auto cfg = src_.current();
    const auto i = static_cast<std::size_t>(backend);
    const auto& b = cfg->backends[i];
    std::shared_ptr<std::atomic<std::size_t>> admitted;
    std::optional<std::string> charge_to;
    {
        std::lock_guard lock(mu_);
        admitted = child_of(i).admitted;
        charge_to = std::exchange(child_of(i).drained_for, std::nullopt);
    }
    clock::duration grace = cfg->timeouts.shutdown_grace;
    {
        std::lock_guard lock(mu_);
        const auto group = group_of(*cfg, b.name);
        if (child_of(i).swapping && group) grace = cfg->swap_groups[*group].drain_grace;
    }
    net::steady_timer timer(ex_);
    const auto t0 = clock::now();
    const auto deadline = t0 + grace;
    while (clock::now() < deadline) {
        const auto views = reg_.snapshot();
        if (views[i].in_flight == 0 && admitted->load() == 0) break;
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
    const auto t1 = clock::now();
    if (save_) {
        try {
            co_await save_(backend, charge_to);
        } catch (const std::exception& e) {
            log()->warn("backend {}: saving slots before the stop failed: {}", b.name, e.what());
        }
    }
    const auto t2 = clock::now();
    std::unique_ptr<process> proc;
    {
        std::lock_guard lock(mu_);
        proc = std::move(child_of(i).proc);
    }
    reg_.set_stopped(backend, true);  // no new plans; the monitor cannot revive it meanwhile
    if (proc) {
        const auto ended = proc->terminate(stop_grace);
        log()->info("backend {}: stopped llama-server (pid {}, {}): {}", b.name, proc->pid(), why,
                    ended.describe());
    }
    reg_.forget_all(backend);
    const auto t3 = clock::now();
    std::lock_guard lock(mu_);
    auto& c = child_of(i);
    if (c.swapping) {
        using secs = std::chrono::duration<double>;
        totals_.drain_seconds += secs(t1 - t0).count();
        totals_.save_seconds += secs(t2 - t1).count();
        totals_.stop_seconds += secs(t3 - t2).count();
        log()->info("backend {}: swapped out (drain {:.2f} s, save {:.2f} s, stop {:.2f} s)",
                    b.name, secs(t1 - t0).count(), secs(t2 - t1).count(), secs(t3 - t2).count());
    }
    c.stopping = c.swapping = c.healthy_seen = c.time_restore = false;
    if (!stopping_) sync();  // the place it held may be a waiter's now
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

}  // namespace warmslot::app
