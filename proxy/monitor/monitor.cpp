#include "monitor/monitor.hpp"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "routing/observations.hpp"
#include "upstream/llama_client.hpp"
#include "util/log.hpp"

namespace warmslot::monitoring {
namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds call_timeout{5000};
constexpr std::chrono::milliseconds down_interval{250};  // checks of a backend that is down

std::shared_ptr<spdlog::logger> log() {
    static auto logger = util::module_logger("routing");
    return logger;
}

json parse(const upstream::reply& r) {
    if (r.ec || r.status != 200) return json();
    return json::parse(r.body, nullptr, false);
}

std::string base_name(const std::string& path) {
    auto name = path.substr(path.find_last_of("/\\") + 1);
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    return name;
}

// Size and modification time of the model file when warmslot can see it but not read it as
// GGUF, so a model replaced under the same name gets new snapshot keys. Read at every check.
std::string model_file_stamp(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return "?";
    const auto time = std::filesystem::last_write_time(path, ec);
    if (ec) return std::to_string(size);
    return std::to_string(size) + "@" + std::to_string(time.time_since_epoch().count());
}

// The KV-changing variables the process of a command backend sees: its `env:` entries, else
// what it inherits from warmslot's environment (LLAMA_* passes, app/supervised_argv.hpp).
// A url backend's environment is not visible: "" (docs/architecture.md, backend identity).
std::string backend_kv_env(const config::backend& b) {
    if (!b.supervised()) return "";
    return routing::kv_env([&b](const std::string& name) { return b.env_value(name); });
}

// Gives the probe's slots back on every path.
struct probe_tickets {
    routing::registry& reg;
    std::vector<routing::ticket> tickets;
    ~probe_tickets() {
        for (const auto& t : tickets) {
            reg.set_held(t, {}, 0);  // erased (or holding a probe prompt worth nothing)
            reg.release(t);
        }
    }
};

}  // namespace

monitor::monitor(const config::source& src, routing::registry& reg, net::any_io_executor ex)
    : src_(src), reg_(reg), ex_(ex), pool_(ex, 4) {
    reg_.set_check_listener([this](int backend) { check_now(backend); });
}

monitor::~monitor() { reg_.set_check_listener(nullptr); }

void monitor::start() {
    net::post(ex_, [this] { start_watches(); });
}

void monitor::check_now(int backend) {
    net::post(ex_, [this, backend] {
        if (backend < 0 || static_cast<std::size_t>(backend) >= state_.size()) return;
        const auto cfg = src_.current();
        if (static_cast<std::size_t>(backend) < cfg->backends.size()) {
            log()->debug("backend {}: a request waits for a check", cfg->backends[backend].name);
        }
        auto& st = *state_[static_cast<std::size_t>(backend)];
        st.requested = true;
        if (st.timer) st.timer->cancel();
    });
}

void monitor::start_watches() {
    const auto cfg = src_.current();
    const auto n = cfg->backends.size();
    while (state_.size() < n) state_.push_back(std::make_unique<watch_state>());
    for (std::size_t i = 0; i < n; ++i) {
        auto& st = *state_[i];
        if (cfg->backends[i].retired || st.watching) continue;
        st.watching = true;
        st.down = true;  // a returning backend is read afresh
        st.identity.clear();
        st.base.clear();
        net::co_spawn(ex_, watch(i), net::detached);
        net::co_spawn(ex_, sentinel(i), net::detached);
    }
}

void monitor::stop() {
    stopping_ = true;
    // The sentinels' reads end now, not at the backends' next close.
    net::post(ex_, [this] {
        for (const auto& st : state_) {
            if (st->sentinel) st->sentinel->stream.close();
        }
    });
}

awaitable<void> monitor::watch(std::size_t backend) {
    net::steady_timer timer(ex_);
    auto& st = *state_[backend];
    while (!stopping_) {
        const auto cfg = src_.current();
        if (cfg->backends[backend].retired) break;
        st.requested = false;
        co_await refresh(backend);
        if (st.requested) continue;  // asked for while this one ran: it may have been too early
        // A backend that does not answer is looked at more often: requests wait for it.
        timer.expires_after(st.down ? std::min<std::chrono::milliseconds>(
                                          cfg->routing.reconcile_interval, down_interval)
                                    : cfg->routing.reconcile_interval);
        st.timer = &timer;
        co_await timer.async_wait(nothrow);
        st.timer = nullptr;
    }
    st.watching = false;
}

// Between two checks a restart goes unseen: requests are planned on what the old process held
// (a hit on a slot the restart emptied computes its whole prompt; a miss restores nothing when
// the slot is believed to hold the prefix). The process closes every connection to it when it
// ends, so one kept open here, sending nothing, ends at that moment, and the backend is checked
// at once: it does not answer (and requests wait for it, service/forward.cpp,
// wait_for_backend) or answers as a new process (its slots are read afresh). llama-server also
// closes a connection idle for its keep-alive timeout (5 s): a check then, and a new one.
awaitable<void> monitor::sentinel(std::size_t i) {
    constexpr auto pause = std::chrono::milliseconds(200);  // between two connections
    net::steady_timer timer(ex_);
    auto& st = *state_[i];
    while (!stopping_) {
        const auto cfg = src_.current();
        if (i >= cfg->backends.size() || cfg->backends[i].retired) break;
        const auto b = cfg->backends[i];
        // Down, it is checked often (watch); the sentinel waits until it answers again.
        if (!st.down) {
            auto [ec, c] = co_await pool_.acquire(b.host, b.port, call_timeout);
            if (!ec && c && !stopping_) {
                c->stream.expires_never();
                st.sentinel = c.get();
                std::array<char, 1> byte{};
                co_await c->stream.async_read_some(net::buffer(byte), nothrow);
                st.sentinel = nullptr;
                if (stopping_) break;
                log()->debug("backend {}: its connection closed: checked now", b.name);
            }
            check_now(static_cast<int>(i));
        }
        timer.expires_after(pause);
        co_await timer.async_wait(nothrow);
    }
}

// One check: counted in the registry, so requests waiting for it go on when it is done.
awaitable<void> monitor::refresh(std::size_t i) {
    const int idx = static_cast<int>(i);
    reg_.check_started(idx);
    try {
        co_await look(i);
    } catch (const std::exception& e) {
        const auto cfg = src_.current();
        log()->warn("backend {}: check failed ({}): marked unhealthy, checking again",
                    cfg->backends[i].name, e.what());
        state_[i]->down = true;
        reg_.set_healthy(idx, false);
    }
    reg_.check_done(idx);
}

void monitor::unreadable(const config::backend& b, watch_state& st, const char* what) {
    if (st.unreadable) return;
    st.unreadable = true;
    log()->warn(
        "backend {}: {} answered fields of unexpected types: its state is unknown, it "
        "takes no requests until it answers properly (polling goes on)",
        b.name, what);
}

// A process warmslot started requires the key warmslot gave it: one that answers /props without
// it is another program on that port (started there while warmslot's was stopped), and gets
// no request. Backends warmslot does not start are taken as they are.
awaitable<bool> monitor::own_process(config::backend b, watch_state& st) {
    if (!b.child_key) co_return true;
    auto bare = b;
    bare.child_key.reset();
    const auto r =
        co_await upstream::call(pool_, bare, http::verb::get, "/props", "", call_timeout);
    if (r.ec || r.status == 401) {  // unreachable: the usual checks say so
        st.impostor = false;
        co_return true;
    }
    if (std::exchange(st.impostor, true)) co_return false;
    log()->error(
        "backend {}: the process on {} answers without the key warmslot gave the "
        "process it started: it is not that process, and gets no requests",
        b.name, b.url);
    co_return false;
}

// Reads /props (and, when the backend is new, came back or changed, /v1/models and
// /lora-adapters, and probes its slots), then /slots.
awaitable<bool> monitor::look(std::size_t i) {
    const auto cfg = src_.current();
    const auto b = cfg->backends[i];
    const int idx = static_cast<int>(i);
    auto& st = *state_[i];
    if (!b.router_model.empty()) {
        const auto state = co_await router_state(b);
        if (state && state->empty()) {
            if (!std::exchange(st.unlisted, true))
                log()->error(
                    "backend {}: the router on {} does not list model {} (its GET "
                    "/models): no request goes there; check the ids in `models`",
                    b.name, b.url, b.router_model);
            st.down = true;
            reg_.set_healthy(idx, false);
            co_return false;
        }
        st.unlisted = false;
        if (state && *state != "loaded" && *state != "sleeping")
            co_return co_await router_unloaded(b, i);
    }
    const auto answer =
        co_await upstream::call(pool_, b, http::verb::get, "/props", "", call_timeout);
    if (!b.router_model.empty() && !answer.ec && answer.status == 400 &&
        answer.body.find("not loaded") != std::string::npos) {
        co_return co_await router_unloaded(b, i);
    }
    const json props = parse(answer);
    const auto reading = routing::read_props(props);
    if (!reading) {
        if (props.is_object()) unreadable(b, st, "GET /props");
        // No answer, or 503 while a model loads: a backend read before is expected back.
        const bool gone = answer.ec || answer.status == 503;
        reg_.set_returning(idx, gone && !st.identity.empty());
        st.down = true;
        reg_.set_healthy(idx, false);
        co_return false;
    }
    auto info = reading->info;
    const auto [stamp, facts] = co_await model_stamp(info.model_path);
    info.architecture = facts.architecture;
    info.sliding_window = facts.sliding_window;
    const std::string flags = b.supervised() ? routing::kv_flags(b.command) : "";
    const std::string env = backend_kv_env(b);
    const std::string base = routing::identity_of(info, stamp, flags, env);
    if (st.down || base != st.base) {
        // New, back after a failure, or another model, file or build: no plans on the old
        // beliefs until it has been read again and its slots probed.
        reg_.set_healthy(idx, false);
        const bool own = co_await own_process(b, st);
        reg_.set_foreign(idx, !own);
        if (!own) {
            st.down = true;
            co_return false;
        }
        co_await read_identity(b, i, info, reading->model_alias, stamp, flags, env);
        if (!st.identity.empty() && info.identity != st.identity) {
            log()->warn("backend {} restarted or changed ({}): its slots are assumed empty", b.name,
                        info.model_path);
            reg_.forget_all(idx);
        } else if (!st.identity.empty() && st.down) {
            // Back after it did not answer: the same model and settings, maybe a new process.
            log()->warn("backend {} answers again: its slots are assumed empty", b.name);
            reg_.forget_all(idx);
        }
        const bool first = st.identity.empty() || info.identity != st.identity;
        st.identity = info.identity;
        st.base = base;
        st.down = false;
        st.probe_pending = cfg->routing.enabled;
        reg_.set_info(idx, info, false);
        if (first) {
            log()->info("backend {}: {} slots of {} tokens, model {}{}", b.name, info.total_slots,
                        info.n_ctx_per_slot, info.model_path,
                        info.lora.empty() ? "" : ", adapters " + info.lora);
        }
    }
    if (co_await let_sleep(b, i, reading->sleeping)) {
        reg_.set_healthy(idx, true);
        co_return true;
    }
    bool gone = false;
    const auto slots = co_await read_slots(b, &gone);
    if (!slots) {
        // A process that answers /props while it loads its model answers /slots with 503.
        if (!gone) unreadable(b, st, "GET /slots");
        reg_.set_returning(idx, gone && !st.identity.empty());
        st.down = true;
        reg_.set_healthy(idx, false);
        co_return false;
    }
    st.unreadable = false;
    // A restart with the same identity (same model, build and flags) changes nothing above:
    // the task numbers beginning again tell it, and nothing it held before is left.
    const auto task = routing::latest_task(*slots);
    if (routing::task_counter_went_back(st.last_task, task)) {
        if (b.router_model.empty())
            log()->warn("backend {} restarted (its task numbers began again): slots assumed empty",
                        b.name);
        else
            log()->info("backend {}: the router loaded model {} again: its slots began empty",
                        b.name, b.router_model);
        reg_.forget_all(idx);
    }
    st.last_task = task;
    reg_.reconcile(idx, *slots, routing::clock::now());
    if (st.probe_pending) {
        const auto stable = co_await probe_stable_slots(b, i, info.total_slots);
        if (stable) {
            st.probe_pending = false;
            st.pinning = *stable;
            log()->info("backend {}: {}", b.name,
                        st.pinning ? "cache-aware routing on" : "passed through without routing");
        }
        if (auto known = reg_.info(idx)) reg_.set_info(idx, *known, st.pinning);
    }
    reg_.set_healthy(idx, true);
    co_return true;
}

// What /v1/models and /lora-adapters add to /props: model ids and shape, adapters.
awaitable<void> monitor::read_identity(const config::backend& b, std::size_t i,
                                       routing::backend_info& info, const std::string& alias,
                                       const std::string& stamp, const std::string& flags,
                                       const std::string& env) {
    const auto models = routing::read_models(
        parse(co_await upstream::call(pool_, b, http::verb::get, "/v1/models", "", call_timeout)));
    const auto adapters = parse(
        co_await upstream::call(pool_, b, http::verb::get, "/lora-adapters", "", call_timeout));
    if (!adapters.is_null() && !routing::read_lora(adapters))
        unreadable(b, *state_[i], "GET /lora-adapters");
    info.lora = routing::read_lora(adapters).value_or("");
    info.model_meta = models.meta;
    info.models = b.models;
    // A router lists all its models: each of its backends serves the one it names.
    if (b.router_model.empty())
        info.models.insert(info.models.end(), models.ids.begin(), models.ids.end());
    if (!alias.empty()) info.models.push_back(alias);
    if (!info.model_path.empty()) info.models.push_back(base_name(info.model_path));
    info.identity = routing::identity_of(info, stamp, flags, env);
}

// The model's content identity when warmslot can read its file (the same model on every host
// and path has the same keys), else its size and time, else "?" (routing::identity_of).
awaitable<std::pair<std::string, cache::model_facts>> monitor::model_stamp(std::string path) {
    if (path.empty()) co_return std::pair<std::string, cache::model_facts>{"?", {}};
    const auto facts = co_await net::co_spawn(
        hasher_.get_executor(),
        [this, path]() -> awaitable<std::optional<cache::model_facts>> {
            co_return model_ids_.get(path);
        },
        net::use_awaitable);
    if (facts) co_return std::pair{facts->id, *facts};
    co_return std::pair<std::string, cache::model_facts>{model_file_stamp(path), {}};
}

awaitable<std::optional<std::vector<routing::observed_slot>>> monitor::read_slots(config::backend b,
                                                                                  bool* gone) {
    const auto r = co_await upstream::call(pool_, b, http::verb::get, "/slots", "", call_timeout);
    if (gone) *gone = r.ec || r.status == 503;
    co_return routing::read_slots(parse(r));
}

// llama-server with its defaults (no -np: unified KV and --cache-idle-slots) moves every idle
// slot into its RAM cache and clears it when a new task starts, so a pinned slot would be empty
// and pinning a slot being swapped can hang the server. Two idle slots, reserved through the
// registry like a request's (never a busy one), are given a tiny prompt each, pinned; if the
// first is empty after the second ran, slot contents are not stable. std::nullopt: no two
// slots are idle now (tried again at the next check).
awaitable<std::optional<bool>> monitor::probe_stable_slots(config::backend b, std::size_t i,
                                                           int total_slots) {
    if (total_slots < 2) co_return true;
    probe_tickets held{reg_, reg_.reserve_idle(static_cast<int>(i), 2)};
    if (held.tickets.size() < 2) co_return std::nullopt;
    // The higher id first: llama-server then finds it the least recently used of the two, as
    // warmslot's planner does between slots it never used (ties to the higher id, rule 10), so
    // the first request without id_slot goes where warmslot expects it.
    const int first = std::max(*held.tickets[0].p.slot, *held.tickets[1].p.slot);
    const int second = std::min(*held.tickets[0].p.slot, *held.tickets[1].p.slot);
    const auto find = [](const std::vector<routing::observed_slot>& v, int id) {
        return std::find_if(v.begin(), v.end(), [id](const auto& o) { return o.id == id; });
    };
    auto before = co_await read_slots(b);
    if (!before) co_return std::nullopt;
    for (int slot : {first, second}) {
        const auto it = find(*before, slot);
        if (it == before->end() || it->processing) co_return std::nullopt;
    }
    for (int slot : {first, second}) {
        // The slot's id as the prompt: a token or two, the least a probe can make llama-server
        // compute (it is counted in the backend's prompt tokens like any request's).
        json body = {{"prompt", std::to_string(slot)},
                     {"n_predict", 1},
                     {"id_slot", slot},
                     {"cache_prompt", true},
                     {"temperature", 0}};
        // Only the transport matters: the server may reject the one sampled token (a chat
        // parser refusing random output answers 500) after the prompt is in the slot.
        auto r = co_await upstream::call(pool_, b, http::verb::post, "/completion", body.dump(),
                                         call_timeout);
        if (r.ec) co_return false;
    }
    auto after = co_await read_slots(b);
    bool stable = false;
    if (after) {
        // The probe's own tasks: a later process numbers its tasks from 0 again.
        auto& last = state_[i]->last_task;
        last = std::max(last, routing::latest_task(*after));
        const auto it = find(*after, first);
        stable = it != after->end() && it->n_prompt_tokens.value_or(0) > 0;
    }
    for (int slot : {first, second}) {  // leave no trace: the probe's prompts are worth nothing
        const std::string target = "/slots/" + std::to_string(slot) + "?action=erase";
        co_await upstream::call(pool_, b, http::verb::post, target, "{}", call_timeout);
    }
    if (!stable && !state_[i]->warned) {
        state_[i]->warned = true;
        log()->warn(
            "backend {} clears idle slots into its RAM cache (llama-server started without "
            "-np): warmslot passes its requests through unrouted, so it does no worse than "
            "llama-server alone. For cache-aware routing start it with an explicit -np N "
            "(e.g. -np 4), or --no-cache-idle-slots, or --cache-ram 0.",
            b.name);
    }
    co_return stable;
}

}  // namespace warmslot::monitoring
