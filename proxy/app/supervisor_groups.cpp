// The supervisor's swap groups and the requests that wait for a backend to start (wake).
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>
#include <utility>

#include "app/supervisor.hpp"
#include "app/supervisor_child.hpp"
#include "routing/swap.hpp"
#include "util/log.hpp"

namespace warmslot::app {
namespace {

constexpr auto wait_poll = std::chrono::milliseconds(50);
constexpr auto retry_after = std::chrono::seconds(5);

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("warmslot");
    return logger;
}

// Ends an admission: the drain of its backend waits for every lease to go.
struct lease {
    std::shared_ptr<std::atomic<std::size_t>> count;
    explicit lease(std::shared_ptr<std::atomic<std::size_t>> c) : count(std::move(c)) {
        count->fetch_add(1);
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { count->fetch_sub(1); }
};

// The index of the active backend named `name`; std::nullopt when none.
std::optional<std::size_t> backend_named(const config::config& cfg, const std::string& name) {
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        if (cfg.backends[i].name == name && !cfg.backends[i].retired) return i;
    }
    return std::nullopt;
}

const char* state_name(routing::swap::state st) {
    switch (st) {
        case routing::swap::state::stopped: return "stopped";
        case routing::swap::state::starting: return "starting";
        case routing::swap::state::running: return "running";
        case routing::swap::state::draining: return "draining";
    }
    return "stopped";
}

routing::swap::state state_of_child(const supervisor::child* c) {
    if (c == nullptr) return routing::swap::state::stopped;
    if (c->stopping) return routing::swap::state::draining;
    if (!c->proc) return routing::swap::state::stopped;
    return c->healthy_seen ? routing::swap::state::running : routing::swap::state::starting;
}

// The group's limits, its allowed sets as indexes among its active members (the order
// tick_groups describes them in).
routing::swap::limits limits_of(const config::swap_group& g, const config::config& cfg) {
    routing::swap::limits lim{g.max_running, g.min_residency, g.home_after, {}};
    std::vector<std::string> active;
    for (const auto& name : g.backends) {
        if (backend_named(cfg, name)) active.push_back(name);
    }
    for (const auto& set : g.allow) {
        std::vector<std::size_t> indexes;
        for (const auto& name : set) {
            const auto it = std::find(active.begin(), active.end(), name);
            if (it != active.end())
                indexes.push_back(static_cast<std::size_t>(it - active.begin()));
        }
        lim.allow.push_back(std::move(indexes));
    }
    return lim;
}

}  // namespace

std::optional<std::size_t> supervisor::group_of(const config::config& cfg,
                                                const std::string& name) const {
    for (std::size_t g = 0; g < cfg.swap_groups.size(); ++g) {
        const auto& m = cfg.swap_groups[g].backends;
        if (std::find(m.begin(), m.end(), name) != m.end()) return g;
    }
    return std::nullopt;
}

const supervisor::child* supervisor::find_child(std::size_t backend) const {
    return backend < children_.size() ? children_[backend].get() : nullptr;
}

// Each group's decision (routing::swap::decide), carried out: members to start are launched,
// members to drain are added to `stops`.
void supervisor::tick_groups(const config::config& cfg,
                             const std::vector<routing::backend_view>& views, clock::time_point now,
                             stop_list& stops) {
    for (const auto& g : cfg.swap_groups) {
        std::vector<std::size_t> index;
        std::vector<routing::swap::member> members;
        for (const auto& name : g.backends) {
            const auto i = backend_named(cfg, name);
            if (!i) continue;
            const auto& c = child_of(*i);
            routing::swap::member m;
            m.st = state_of_child(&c);
            m.waiting = c.waits.size();
            if (!c.waits.empty()) m.oldest_wait = *c.waits.begin();
            const std::size_t in_flight = *i < views.size() ? views[*i].in_flight : 0;
            m.busy = std::max(in_flight, c.admitted->load());
            m.started = c.healthy_seen ? c.healthy_at : c.started;
            m.last_use = c.last_use;
            m.home = g.home == name;
            index.push_back(*i);
            members.push_back(m);
        }
        const auto d = routing::swap::decide(limits_of(g, cfg), members, now);
        // A drain makes room for the waiting member of the oldest request (decide serves them
        // in that order): the saves before the stop are charged to whoever asked for it.
        std::optional<std::string> asker;
        std::optional<clock::time_point> oldest;
        for (std::size_t k = 0; k < members.size(); ++k) {
            if (members[k].waiting == 0 || (oldest && members[k].oldest_wait >= *oldest)) continue;
            oldest = members[k].oldest_wait;
            asker = child_of(index[k]).asked_by;
        }
        for (const auto k : d.drain) {
            auto& c = child_of(index[k]);
            c.wanted = false;
            c.stopping = c.swapping = true;
            c.drained_for = asker;
            totals_.swaps += 1;
            stops.emplace_back(static_cast<int>(index[k]),
                               "its place in swap group " + g.name + " goes to another backend");
        }
        for (const auto k : d.start) {
            auto& c = child_of(index[k]);
            const auto& b = cfg.backends[index[k]];
            if (now < c.next_start) continue;  // a pause after a failure; next tick
            c.wanted = true;
            c.time_start = true;
            c.time_restore = true;
            log()->info("backend {}: starting in swap group {}{}", b.name, g.name,
                        members[k].waiting > 0 ? "" : " (its home)");
            launch(static_cast<int>(index[k]), b, c);
        }
    }
}

// Runs on the request's worker: marks the matching stopped backends wanted, asks the loop to
// look now, and polls the registry until one is healthy. A request for a member of a swap
// group waits as that member's waiter (wake_group).
awaitable<service::admission> supervisor::wake(const config::config& cfg, std::string model,
                                               std::string tenant, std::function<bool()> gone) {
    const bool any =
        std::any_of(cfg.backends.begin(), cfg.backends.end(),
                    [](const config::backend& b) { return b.supervised() && !b.retired; });
    if (!any) co_return service::admission{};
    const auto views = reg_.snapshot();
    std::vector<std::size_t> waiting, grouped, listed;
    clock::duration limit{};
    for (std::size_t i = 0; i < cfg.backends.size() && i < views.size(); ++i) {
        const auto& b = cfg.backends[i];
        if (b.retired) continue;
        const bool in_group = b.supervised() && group_of(cfg, b.name).has_value();
        if (!in_group && views[i].healthy && (model.empty() || routing::serves(views[i], model)))
            co_return service::admission{};
        const bool lists = std::find(b.models.begin(), b.models.end(), model) != b.models.end();
        const bool named = model.empty() || b.models.empty() || lists;
        if (!b.supervised() || !named) continue;
        if (in_group) {
            (lists ? listed : grouped).push_back(i);
            continue;
        }
        waiting.push_back(i);
        limit = std::max<clock::duration>(limit, b.start_timeout);
    }
    // A member that lists the model by name before the ones that answer to any model.
    if (!listed.empty() || (!grouped.empty() && waiting.empty()))
        co_return co_await wake_group(cfg, listed.empty() ? grouped : listed, std::move(tenant),
                                      std::move(gone));
    if (waiting.empty()) co_return service::admission{};
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
    while (clock::now() < deadline && !gone()) {
        const auto now_views = reg_.snapshot();
        for (auto i : waiting) {
            if (i < now_views.size() && now_views[i].healthy) co_return service::admission{};
        }
        timer.expires_after(wait_poll);
        co_await timer.async_wait(nothrow);
    }
    co_return service::admission{};
}

// Waits until one of `candidates` (members of swap groups) takes requests, and admits the
// request there (a lease its drain waits for). Until then the request is a waiter of the first
// candidate that is on its way (starting, or drained to start again), else of the first one;
// its group decides when it starts. Past the candidate's start_timeout, or when its start
// fails, the request gets an error to answer with 503. A client that leaves takes its waiter
// with it at once: a member nobody waits for any more is not started for it (a drain already
// under way for it still ends, and a start already under way goes on). A request that would be
// the first to wait for a member that is stopped or being drained asks for a start, which
// counts against its tenant's swaps_per_minute: over it, the request gets 429 and nothing
// starts.
awaitable<service::admission> supervisor::wake_group(const config::config& cfg,
                                                     std::vector<std::size_t> candidates,
                                                     std::string tenant,
                                                     std::function<bool()> gone) {
    net::steady_timer timer(co_await net::this_coro::executor);
    std::optional<std::size_t> target;
    std::multiset<clock::time_point>::iterator wait_entry;
    int failures_before = 0;
    const auto leave = [&] {  // under mu_
        if (target) child_of(*target).waits.erase(wait_entry);
    };
    clock::time_point deadline{};
    for (;;) {
        const auto views = reg_.snapshot();
        const auto now = clock::now();
        bool registered = false;
        {
            std::lock_guard lock(mu_);
            if (gone()) {
                leave();
                co_return service::admission{};
            }
            for (const auto i : candidates) {
                auto& c = child_of(i);
                if (c.proc && !c.stopping && i < views.size() && views[i].healthy) {
                    leave();
                    c.last_use = now;
                    co_return service::admission{std::make_shared<lease>(c.admitted), "", {}};
                }
            }
            if (target) {
                const auto& c = child_of(*target);
                const auto& b = cfg.backends[*target];
                if (c.start_failures != failures_before) {
                    leave();
                    co_return service::admission{
                        nullptr, "backend " + b.name + " could not start: " + c.last_failure,
                        retry_after};
                }
                if (now >= deadline) {
                    leave();
                    co_return service::admission{
                        nullptr,
                        fmt::format(
                            "backend {} did not start within its start_timeout ({} s): "
                            "it is {} in swap group {}",
                            b.name,
                            std::chrono::duration_cast<std::chrono::seconds>(b.start_timeout)
                                .count(),
                            state_name(state_of_child(&c)),
                            cfg.swap_groups[*group_of(cfg, b.name)].name),
                        retry_after};
                }
            } else {
                target = candidates.front();
                for (const auto i : candidates) {
                    if (state_of_child(find_child(i)) != routing::swap::state::stopped) {
                        target = i;
                        break;
                    }
                }
                auto& c = child_of(*target);
                const auto st = state_of_child(&c);
                const bool asks_start = c.waits.empty() && (st == routing::swap::state::stopped ||
                                                            st == routing::swap::state::draining);
                if (asks_start) {
                    if (const auto wait = swap_limits_.take_swap(
                            tenant, cfg.tenants.limits.swaps_per_minute, now)) {
                        const auto secs = std::chrono::ceil<std::chrono::seconds>(*wait);
                        co_return service::admission{
                            nullptr,
                            fmt::format("this tenant started {} swap group members in the last "
                                        "minute (tenants.limits.swaps_per_minute); backend {} "
                                        "stays {}",
                                        cfg.tenants.limits.swaps_per_minute,
                                        cfg.backends[*target].name, state_name(st)),
                            std::max(secs, std::chrono::seconds(1)), api::error_kind::rate_limited};
                    }
                    c.asked_by = tenant;
                }
                wait_entry = c.waits.insert(now);
                failures_before = c.start_failures;
                deadline = now + cfg.backends[*target].start_timeout;
                registered = true;
            }
        }
        if (registered) sync();
        timer.expires_after(wait_poll);
        co_await timer.async_wait(nothrow);
    }
}

void supervisor::restored(int backend, double seconds) {
    const auto cfg = src_.current();
    const auto i = static_cast<std::size_t>(backend);
    std::lock_guard lock(mu_);
    auto* c = i < children_.size() ? children_[i].get() : nullptr;
    if (c == nullptr || !c->time_restore || !c->proc) return;
    c->time_restore = false;
    totals_.restore_seconds += seconds;
    log()->info("backend {}: first restore after its swap in: {:.2f} s",
                i < cfg->backends.size() ? cfg->backends[i].name : std::to_string(backend),
                seconds);
}

void supervisor::used(int backend) {
    std::lock_guard lock(mu_);
    child_of(static_cast<std::size_t>(backend)).last_use = clock::now();
}

std::vector<supervisor::group_view> supervisor::groups() const {
    const auto cfg = src_.current();
    std::lock_guard lock(mu_);
    std::vector<group_view> out;
    for (const auto& g : cfg->swap_groups) {
        group_view v{g.name, g.max_running, g.allow, {}};
        for (const auto& name : g.backends) {
            const auto i = backend_named(*cfg, name);
            const auto* c = i ? find_child(*i) : nullptr;
            v.members.push_back(
                {name, state_name(state_of_child(c)), c ? c->waits.size() : 0, g.home == name});
        }
        out.push_back(std::move(v));
    }
    return out;
}

supervisor::swap_totals supervisor::totals() const {
    std::lock_guard lock(mu_);
    return totals_;
}

std::string supervisor::state_of(int backend) const {
    std::lock_guard lock(mu_);
    return state_name(state_of_child(find_child(static_cast<std::size_t>(backend))));
}

nlohmann::json supervisor::swap_status() const {
    nlohmann::json groups_json = nlohmann::json::array();
    for (const auto& g : groups()) {
        nlohmann::json members = nlohmann::json::array();
        for (const auto& m : g.members)
            members.push_back({{"backend", m.backend},
                               {"state", m.state},
                               {"waiting", m.waiting},
                               {"home", m.home}});
        nlohmann::json entry = {
            {"name", g.name}, {"max_running", g.max_running}, {"members", members}};
        if (!g.allow.empty()) entry["allow"] = g.allow;
        groups_json.push_back(std::move(entry));
    }
    const auto t = totals();
    return {{"groups", groups_json},
            {"totals",
             {{"swaps", t.swaps},
              {"failed_starts", t.failed_starts},
              {"drain_seconds", t.drain_seconds},
              {"save_seconds", t.save_seconds},
              {"stop_seconds", t.stop_seconds},
              {"start_seconds", t.start_seconds},
              {"restore_seconds", t.restore_seconds}}}};
}

std::string supervisor::swap_metrics() const {
    const auto t = totals();
    std::string out = fmt::format(
        "# HELP warmslot_swaps_total Backends of swap groups stopped to make room for another.\n"
        "# TYPE warmslot_swaps_total counter\nwarmslot_swaps_total {}\n"
        "# HELP warmslot_swap_failed_starts_total Supervised starts that ended before the "
        "process turned healthy.\n"
        "# TYPE warmslot_swap_failed_starts_total counter\nwarmslot_swap_failed_starts_total {}\n"
        "# HELP warmslot_swap_seconds_total Seconds spent in swaps, by phase (drain: requests "
        "finish; save: valuable slots to disk; stop: the process ends; start: the next one turns "
        "healthy; restore: the first restore of a saved prefix into it).\n"
        "# TYPE warmslot_swap_seconds_total counter\n",
        t.swaps, t.failed_starts);
    const std::pair<const char*, double> phases[] = {{"drain", t.drain_seconds},
                                                     {"save", t.save_seconds},
                                                     {"stop", t.stop_seconds},
                                                     {"start", t.start_seconds},
                                                     {"restore", t.restore_seconds}};
    for (const auto& [phase, seconds] : phases)
        out += fmt::format("warmslot_swap_seconds_total{{phase=\"{}\"}} {}\n", phase, seconds);
    out +=
        "# HELP warmslot_backend_running Supervised backends by state (1 = in that state).\n"
        "# TYPE warmslot_backend_running gauge\n";
    for (const auto& g : groups()) {
        for (const auto& m : g.members)
            out += fmt::format(
                "warmslot_backend_running{{group=\"{}\",backend=\"{}\",state=\"{}\"}} 1\n", g.name,
                m.backend, m.state);
    }
    return out;
}

}  // namespace warmslot::app
