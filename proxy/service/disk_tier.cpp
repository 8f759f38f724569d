#include "service/disk_prefix.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <chrono>
#include <iterator>

// The constructor owns the shared tier's (not yet started) pool: its type must be complete.
#include <boost/asio/thread_pool.hpp>


#include "api/prefix_cut.hpp"
#include "cache/slot_file.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot::service {
using namespace disk_detail;

namespace {

using nlohmann::json;
constexpr std::chrono::milliseconds render_timeout{120'000};  // /apply-template, /tokenize
constexpr std::size_t max_counted_prefixes = 65536;  // uses_ entries (snapshot_after_uses)

json parse_ok(const upstream::reply& r) {
    if (r.ec || r.status != 200) return json();
    return json::parse(r.body, nullptr, false);
}

// Whether a failed restore drops its file, and why (`what`). llama-server's answer is the same
// for a damaged file and a full KV cache: the file itself tells them apart (cache/slot_file).
awaitable<bool> drop_after_failure(net::any_io_executor index_ex, cache::index* idx,
                                   const cache::snapshot& s, const upstream::reply& r,
                                   const char*& what) {
    const cache::slot_call_result result{static_cast<bool>(r.ec), r.status, r.body};
    if (cache::judge_restore_failure(result) == cache::restore_failure::keep_file) co_return false;
    auto state = cache::file_state::intact;
    if (idx) {
        state = co_await on_index(index_ex, [path = idx->slot_dir() / s.file, bytes = s.bytes] {
            return cache::check_slot_file(path, bytes);
        });
    }
    if (cache::judge_restore_failure(result, state) == cache::restore_failure::drop_file) {
        what = "llama-server cannot use the file, dropped";
        co_return true;
    }
    what = "the file is intact (no free cells in the KV cache), kept";
    co_return false;
}

}  // namespace

std::string describe(const disk_action& a) {
    switch (a.what) {
        case disk_action::kind::none: return a.choice.empty() ? "" : "slot kept: " + a.choice;
        case disk_action::kind::restored:
            if (a.shared)
                return fmt::format("restored {} tokens (from the shared tier, copied)", a.tokens);
            if (!a.from.empty())
                return fmt::format("restored {} tokens (from replica {}, {})", a.tokens, a.from,
                                   a.brought);
            return a.choice.empty()
                       ? fmt::format("restored {} tokens", a.tokens)
                       : fmt::format("restored {} tokens, cheaper than a rollback: {}", a.tokens,
                                     a.choice);
        case disk_action::kind::snapshotted: return fmt::format("snapshot {} tokens", a.tokens);
        case disk_action::kind::restore_failed:
            return a.file_dropped ? "restore failed, file dropped, recomputed"
                                  : "restore failed, file kept, recomputed";
    }
    return "";
}

disk_tier::disk_tier(const config::source& src, routing::registry& reg,
                     net::any_io_executor index_ex, net::any_io_executor file_ex)
    : src_(src), reg_(reg), index_ex_(std::move(index_ex)), file_ex_(std::move(file_ex)),
      shared_(std::make_shared<shared_state>()) {
    shared_->tag = shared_tag();
    std::lock_guard lock(mu_);
    open_indexes(*src_.current());
}

void disk_tier::open_indexes(const config::config& cfg) {
    if (!cfg.cache.enabled) return;
    for (const auto& b : cfg.backends) {
        if (b.retired || b.slot_save_path.empty() || indexes_.count(b.slot_save_path)) continue;
        const std::filesystem::path dir(b.slot_save_path);
        // warmslot makes the directory of a backend it starts; another's is the user's to make.
        if (b.supervised()) std::filesystem::create_directories(dir);
        indexes_[b.slot_save_path] =
            std::make_unique<cache::index>(dir / "warmslot-index.sqlite", dir);
    }
}

void disk_tier::sync() {
    const auto cfg = src_.current();
    std::lock_guard lock(mu_);
    try {
        open_indexes(*cfg);
    } catch (const std::exception& e) {
        log()->error("disk tier: {}", e.what());
    }
}

// The cache switched off by a reload stops new snapshots and restores; files stay.
cache::index* disk_tier::index_for(int backend) const {
    const auto cfg = src_.current();
    if (!cfg->cache.enabled || backend < 0 ||
        static_cast<std::size_t>(backend) >= cfg->backends.size()) {
        return nullptr;
    }
    const auto& dir = cfg->backends[static_cast<std::size_t>(backend)].slot_save_path;
    if (dir.empty()) return nullptr;  // no slot files: no index (and no lock to take)
    std::lock_guard lock(mu_);
    auto it = indexes_.find(dir);
    return it == indexes_.end() ? nullptr : it->second.get();
}

bool disk_tier::restores_allowed(int backend) {
    const auto info = reg_.info(backend);
    std::lock_guard lock(mu_);
    auto& judge = judges_[backend];
    if (info) judge.observe_identity(info->identity);  // another model or build: judged afresh
    return judge.allowed(cache::policy_clock::now());
}

bool disk_tier::saves_allowed(int backend) const {
    std::lock_guard lock(mu_);
    const auto it = save_backoff_.find(backend);
    return it == save_backoff_.end() || it->second.allowed(cache::policy_clock::now());
}

void disk_tier::saved(int backend, bool ok) {
    std::lock_guard lock(mu_);
    auto& b = save_backoff_[backend];
    if (ok) {
        b.succeeded();
        return;
    }
    b.failed(cache::policy_clock::now());
    log()->warn("backend {}: saving a slot failed; no automatic save there for {} s",
                src_.current()->backends[static_cast<std::size_t>(backend)].name,
                b.pause().count());
}

bool disk_tier::enabled_for(int backend) const {
    return backend >= 0 && index_for(backend) != nullptr;
}

// The part before the final user turn, when it is long enough to be worth a file.
std::optional<disk_tier::prefix> disk_tier::stable_prefix(int backend,
                                                          const routing::fingerprint& fp,
                                                          const json& body) {
    const std::size_t stable = fp.stable_levels;
    if (stable == 0 || stable > fp.levels.size()) return std::nullopt;
    const auto views = reg_.snapshot();
    const auto info = reg_.info(backend);
    if (!info || info->identity.empty()) return std::nullopt;
    auto* idx = index_for(backend);
    if (idx == nullptr) return std::nullopt;
    const double tokens = static_cast<double>(fp.levels[stable - 1].bytes) *
                          views[static_cast<std::size_t>(backend)].tokens_per_byte;
    if (tokens < static_cast<double>(src_.current()->cache.min_prefix_tokens)) return std::nullopt;
    prefix p;
    p.index = idx;
    p.levels.assign(fp.levels.begin(), fp.levels.begin() + static_cast<std::ptrdiff_t>(stable));
    const std::string address = info->identity + "\n" + std::to_string(p.levels.back().hash);
    p.key = fmt::format("{:016x}", XXH3_64bits(address.data(), address.size()));
    const auto& messages = body["messages"];
    p.messages = json::array();
    for (std::size_t i = 0; i < stable; ++i) p.messages.push_back(messages[i]);
    p.body = &body;
    return p;
}

awaitable<disk_action> disk_tier::prepare(upstream::pool& pool, routing::ticket& t,
                                          const routing::fingerprint& fp, const json& body,
                                          std::string tenant) {
    disk_action none;
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return none;
    auto p = stable_prefix(t.p.backend, fp, body);
    if (!p) co_return none;
    p->tenant = std::move(tenant);
    const bool judged = !(body.contains("cache_prompt") && body["cache_prompt"] == false);
    // Nothing here fails the request: an index error (SQLITE_FULL on a full disk) only skips
    // the disk tier, and what the registry believes of the slot was set by each step as it went.
    try {
        if (t.p.matched_levels >= p->levels.size()) {  // the slot holds it
            remember(t.p.backend, *t.p.slot, *p);
            if (t.p.matched_levels > p->levels.size() || !holds_more(t, *p)) co_return none;
            co_return co_await restore_or_keep(pool, t, *p, judged);
        }
        // Another request is saving this prefix right now (a burst on one document): its file
        // is what this slot needs, for less than computing the prefix again.
        if (co_await wait_for_save(p->key)) log()->debug("waited for the save of {}", p->key);
        // Leased before the lookup: from the decision to restore until the restore answered,
        // no eviction (another request's snapshot making room) can delete this file.
        auto lease = leases_.take(p->key);
        const bool allowed = restores_allowed(t.p.backend);
        const auto found = co_await find_file(t.p.backend, *p, allowed);
        if (found && allowed) {
            // The slot's own prefix goes first when it is worth keeping and not on disk yet.
            // Restored, or failed and dropped: either way the request runs now; a failed file
            // is replaced by a fresh snapshot on the next use.
            const auto before = co_await save_reserved(pool, t, p->key, false);
            remember(t.p.backend, *t.p.slot, *p);
            auto a = co_await restore(pool, t, *p, found->row);
            a.primed += before.primed;
            a.judged = judged;
            if (a.what == disk_action::kind::restored) {
                a.from = found->from;
                a.brought = found->brought;
                a.shared = found->shared;
            }
            co_return a;
        }
        lease.release();
        remember(t.p.backend, *t.p.slot, *p);  // the request brings it there
        std::uint64_t uses = 0;
        {
            std::lock_guard lock(mu_);
            // Bounded: past the limit, counts restart (keys are hashes, so the half dropped is
            // an arbitrary one); a prefix then waits a few more uses for its snapshot.
            if (uses_.size() >= max_counted_prefixes) {
                const auto half = static_cast<std::ptrdiff_t>(uses_.size() / 2);
                uses_.erase(uses_.begin(), std::next(uses_.begin(), half));
            }
            uses = ++uses_[p->key];
        }
        if (found || !allowed || uses < src_.current()->cache.snapshot_after_uses) co_return none;
        co_return co_await snapshot(pool, t, *p, false);
    } catch (const std::exception& e) {
        log()->warn("disk tier skipped for this request: {}", e.what());
        remember(t.p.backend, *t.p.slot, *p);
    }
    co_return none;
}

// Waits while another request holds a lease on `key`: it is saving the prefix (then its file is
// found afterwards) or restoring it (a short wait, for nothing). Polls; at most as long as one
// slot call may take. True when it waited.
awaitable<bool> disk_tier::wait_for_save(const std::string& key) {
    if (leases_.count(key) == 0) co_return false;
    const auto deadline = std::chrono::steady_clock::now() + src_.current()->cache.slot_call_timeout;
    net::steady_timer timer(co_await net::this_coro::executor);
    while (leases_.count(key) > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
    co_return true;
}

awaitable<disk_action> disk_tier::restore(upstream::pool& pool, routing::ticket& t,
                                          const prefix& p, const cache::snapshot& s) {
    const auto cfg = src_.current();
    const auto& b = cfg->backends[static_cast<std::size_t>(t.p.backend)];
    auto* idx = p.index;
    const std::string target = fmt::format("/slots/{}?action=restore", *t.p.slot);
    json request = {{"filename", s.file}};
    const auto called = std::chrono::steady_clock::now();
    const auto r = co_await upstream::call(pool, b, http::verb::post, target, request.dump(),
                                           cfg->cache.slot_call_timeout);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - called;
    const json reply = parse_ok(r);
    disk_action a;
    a.key = p.key;
    if (!reply.is_object()) {
        // What the slot holds now is unknown (llama-server wipes it when a file does not load;
        // a restore that timed out may still run): believed empty.
        reg_.set_held(t, {}, 0);
        a.what = disk_action::kind::restore_failed;
        const char* what = "file kept";
        a.file_dropped = co_await drop_after_failure(index_ex_, idx, s, r, what);
        log()->warn("restoring {} into {} slot {} failed ({}): {}, recomputing", s.file, b.name,
                    *t.p.slot, r.ec ? r.ec.message() : std::to_string(r.status), what);
        if (a.file_dropped) {
            co_await on_index(index_ex_, [idx, key = p.key] { idx->drop(key); return true; });
        }
        co_return a;
    }
    a.what = disk_action::kind::restored;
    a.tokens = reply.value("n_restored", std::uint64_t{0});
    double ms = 0;
    if (auto tm = reply.find("timings"); tm != reply.end() && tm->is_object()) {
        ms = tm->value("restore_ms", 0.0);
    }
    reg_.set_held(t, p.levels, a.tokens);
    {
        std::lock_guard lock(mu_);
        restore_rates_[t.p.backend].observe(s.bytes, ms);
    }
    if (on_restore_) on_restore_(t.p.backend, took.count());
    co_await on_index(index_ex_, [idx, key = p.key, ms] {
        idx->touch(key, unix_now(), ms);
        return true;
    });
    co_return a;
}

// Render the prefix and the whole request the way the chat endpoint does, and keep the prefix
// only when its tokens are a prefix of the request's tokens (a template may render a message
// differently once more follow it, and a tokenizer may merge across the cut).
//
// A template that cannot render the prefix alone (Qwen3.5's refuses messages without a user
// query) renders it with stand-in user turns after it, and the prefix is cut where the first
// of them begins, or a few tokens before (api/prefix_cut.hpp). Never later: a hybrid model then
// keeps the checkpoint llama-server makes where the request's last user message starts, which
// the next question on the same prefix rolls back to.
awaitable<std::optional<std::vector<int>>> disk_tier::prefix_tokens(upstream::pool& pool,
                                                                    int backend,
                                                                    const json& messages,
                                                                    const json& body) {
    json part = body;
    part.erase("stream");
    part["messages"] = messages;
    part["add_generation_prompt"] = false;
    json whole = body;
    whole.erase("stream");
    const auto full = co_await rendered_tokens(pool, backend, whole);
    if (!full || full->empty()) co_return std::nullopt;
    auto alone = co_await rendered_tokens(pool, backend, part);
    if (!alone) alone = co_await cut_before_stand_in(pool, backend, part);
    if (!alone) co_return std::nullopt;
    const auto& p = *alone;
    if (p.empty() || p.size() >= full->size() || !std::equal(p.begin(), p.end(), full->begin())) {
        co_return std::nullopt;
    }
    co_return p;
}

// `part` (the prefix's messages, no generation prompt) rendered with one and with two stand-in
// user turns; the tokens of the text before the first of them (api::stable_text_end).
awaitable<std::optional<std::vector<int>>> disk_tier::cut_before_stand_in(upstream::pool& pool,
                                                                          int backend, json part) {
    const json turn = {{"role", "user"}, {"content", std::string(api::stand_in_marker)}};
    part["messages"].push_back(turn);
    const auto one = co_await rendered_text(pool, backend, part);
    part["messages"].push_back(turn);
    const auto two = one ? co_await rendered_text(pool, backend, part) : std::nullopt;
    if (!two) co_return std::nullopt;
    const auto end = api::stable_text_end(*one, *two);
    if (!end) co_return std::nullopt;
    co_return co_await tokens_of(pool, backend, one->substr(0, *end));
}

// A chat body's prompt tokens as the chat endpoint makes them: /apply-template, then /tokenize
// with the special tokens added and parsed. std::nullopt when the server refuses either.
awaitable<std::optional<std::vector<int>>> disk_tier::rendered_tokens(upstream::pool& pool,
                                                                      int backend,
                                                                      const json& body) {
    const auto text = co_await rendered_text(pool, backend, body);
    if (!text) co_return std::nullopt;
    co_return co_await tokens_of(pool, backend, *text);
}

// The prompt text /apply-template renders for a chat body; std::nullopt when it refuses.
awaitable<std::optional<std::string>> disk_tier::rendered_text(upstream::pool& pool, int backend,
                                                               const json& body) {
    const auto cfg = src_.current();
    const auto& b = cfg->backends[static_cast<std::size_t>(backend)];
    const json text = parse_ok(co_await upstream::call(pool, b, http::verb::post,
                                                       "/apply-template", body.dump(),
                                                       render_timeout));
    if (!text.contains("prompt") || !text["prompt"].is_string()) co_return std::nullopt;
    co_return text["prompt"].get<std::string>();
}

// `text` tokenized as the chat endpoint does: special tokens added and parsed.
awaitable<std::optional<std::vector<int>>> disk_tier::tokens_of(upstream::pool& pool, int backend,
                                                                std::string text) {
    const auto cfg = src_.current();
    const auto& b = cfg->backends[static_cast<std::size_t>(backend)];
    json req = {{"content", std::move(text)}, {"add_special", true}, {"parse_special", true}};
    const json r = parse_ok(co_await upstream::call(pool, b, http::verb::post, "/tokenize",
                                                    req.dump(), render_timeout));
    if (!r.contains("tokens") || !r["tokens"].is_array()) co_return std::nullopt;
    try {
        co_return r["tokens"].get<std::vector<int>>();
    } catch (const json::exception&) {
        co_return std::nullopt;
    }
}

}  // namespace warmslot::service
