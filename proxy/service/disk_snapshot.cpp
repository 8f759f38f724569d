// Making a snapshot: prime the planned slot with exactly the prefix, save it, index it.
// The request that follows extends the primed slot, so a snapshot adds no prefill.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "api/timings.hpp"
#include "service/disk_prefix.hpp"
#include "upstream/llama_client.hpp"
#include "util/log.hpp"

namespace warmslot::service {
using namespace disk_detail;

namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds save_timeout{120'000};

// True when GET /slots shows `slot` holding exactly `tokens` tokens.
awaitable<bool> slot_holds(upstream::pool& pool, const config::backend& b, int slot,
                           std::size_t tokens) {
    const auto r = co_await upstream::call(pool, b, http::verb::get, "/slots", "", save_timeout);
    const json slots = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    if (!slots.is_array()) co_return false;
    for (const auto& s : slots) {
        if (s.is_object() && s.value("id", -1) == slot) {
            co_return s.value("n_prompt_tokens", std::size_t{0}) == tokens;
        }
    }
    co_return false;
}

}  // namespace

// A priming that computed the prefix from scratch left only its own context checkpoints in the
// slot, near the prefix's end (at n-4 and n-4-n_ubatch). On a hybrid model they would later push
// out the checkpoint llama-server makes where the request's last user message starts (one closer
// than --checkpoint-min-step to an earlier checkpoint is dropped), so the next question on the
// same prefix would roll back n_ubatch tokens further than without warmslot. Restoring the file
// just written leaves the slot holding exactly the prefix and no checkpoints (llama-server.md
// section 4), as a restore from disk does. A priming that extended what the slot held keeps its
// checkpoints: the earlier ones let another conversation on a shorter prefix roll back to it.
awaitable<void> disk_tier::drop_checkpoints(upstream::pool& pool, const config::backend& b,
                                            routing::ticket& t, std::string file,
                                            std::uint64_t tokens) {
    const std::string target = fmt::format("/slots/{}?action=restore", *t.p.slot);
    const json request = {{"filename", file}};
    const auto r =
        co_await upstream::call(pool, b, http::verb::post, target, request.dump(), save_timeout);
    const json reply = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    if (!reply.is_object() || reply.value("n_restored", std::uint64_t{0}) != tokens) {
        // A failed restore wipes the slot: the request then computes its whole prompt.
        log()->warn("reloading {} into {} slot {} failed ({}): the slot is empty", file, b.name,
                    *t.p.slot, r.ec ? r.ec.message() : std::to_string(r.status));
        reg_.set_held(t, {}, 0);
    }
}

awaitable<disk_action> disk_tier::snapshot(upstream::pool& pool, routing::ticket& t,
                                           const prefix& p) {
    disk_action a;
    const auto cfg = src_.current();
    const auto& b = cfg->backends[static_cast<std::size_t>(t.p.backend)];
    auto* idx = index_for(t.p.backend);
    const auto tokens = co_await prefix_tokens(pool, t.p.backend, p.messages, *p.body);
    if (!tokens) {
        log()->debug("prefix {} is not a token prefix of its request: no snapshot", p.key);
        co_return a;
    }
    // The slot now gets exactly the prefix: what the request would compute first anyway.
    json prime = {{"prompt", *tokens}, {"n_predict", 1}, {"id_slot", *t.p.slot},
                  {"cache_prompt", true}, {"temperature", 0}};
    const auto primed = co_await upstream::call(pool, b, http::verb::post, "/completion",
                                                prime.dump(), cfg->timeouts.upstream_response);
    const auto prime_stats =
        primed.status == 200 ? api::find_prompt_stats(primed.body) : std::nullopt;
    const bool from_scratch = prime_stats && prime_stats->cached == 0;
    // The answer's status is not the test (a chat parser may refuse the one sampled token after
    // the prompt is in the slot): the slot must hold exactly the prefix.
    if (primed.ec || !co_await slot_holds(pool, b, *t.p.slot, tokens->size())) {
        reg_.set_held(t, {}, 0);
        co_return a;
    }
    reg_.set_held(t, p.levels, tokens->size());
    {
        std::lock_guard lock(mu_);
        busy_keys_.insert(p.key);
    }
    const std::string file = cache::file_name_for(p.key);
    const std::string target = fmt::format("/slots/{}?action=save", *t.p.slot);
    const json save = {{"filename", file}};
    auto saved = co_await upstream::call(pool, b, http::verb::post, target, save.dump(), save_timeout);
    if (saved.status != 200) {
        // Perhaps the disk is full: make room once and try again, else go without a snapshot.
        const std::uint64_t need = tokens->size() * 2048;
        co_await on_index(index_ex_, [this, idx, need] {
            const auto total = idx->total_bytes();
            std::lock_guard lock(mu_);
            return idx->enforce_budget(total > need ? total - need : 0,
                                       {busy_keys_.begin(), busy_keys_.end()});
        });
        saved = co_await upstream::call(pool, b, http::verb::post, target, save.dump(), save_timeout);
    }
    const json reply = saved.status == 200 ? json::parse(saved.body, nullptr, false) : json();
    if (reply.is_object()) {
        cache::snapshot s;
        s.key = p.key;
        s.identity = reg_.info(t.p.backend)->identity;
        s.file = file;
        s.tokens = reply.value("n_saved", std::uint64_t{0});
        s.bytes = reply.value("n_written", std::uint64_t{0});
        s.created = s.last_used = unix_now();
        if (auto tm = reply.find("timings"); tm != reply.end() && tm->is_object()) {
            s.save_ms = tm->value("save_ms", 0.0);
        }
        const auto views = reg_.snapshot();
        s.prefill_seconds = static_cast<double>(s.tokens) /
            std::max(1.0, views[static_cast<std::size_t>(t.p.backend)].prefill_tokens_per_second);
        co_await on_index(index_ex_, [this, idx, s, max_disk = cfg->cache.max_disk] {
            idx->put(s);
            std::lock_guard lock(mu_);
            return idx->enforce_budget(max_disk, {busy_keys_.begin(), busy_keys_.end()});
        });
        a.what = disk_action::kind::snapshotted;
        a.tokens = s.tokens;
        a.key = p.key;
        if (from_scratch) co_await drop_checkpoints(pool, b, t, file, s.tokens);
    } else {
        log()->warn("saving slot {} of {} failed ({}): going on without a snapshot", *t.p.slot,
                    b.name, saved.ec ? saved.ec.message() : std::to_string(saved.status));
    }
    std::lock_guard lock(mu_);
    busy_keys_.erase(p.key);
    co_return a;
}

void disk_tier::check(int backend, const disk_action& a, const std::optional<api::prompt_stats>& s) {
    if (a.what != disk_action::kind::restored || !s || a.tokens == 0) return;
    if (static_cast<std::uint64_t>(s->cached) * 2 >= a.tokens) return;
    std::lock_guard lock(mu_);
    if (!restore_broken_.insert(backend).second) return;
    log()->warn("backend {}: a restored prefix of {} tokens saved only {} tokens; this model or "
                "its flags cannot resume from a slot file (a sliding-window model needs "
                "--swa-full). Restores there are stopped.",
                src_.current()->backends[static_cast<std::size_t>(backend)].name, a.tokens,
                s->cached);
}

}  // namespace warmslot::service
