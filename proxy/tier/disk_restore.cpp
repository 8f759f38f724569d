// Restoring one file into a reserved slot, and what a failed restore does with the file. See
// disk_tier.hpp (restore).
#include <algorithm>
#include <chrono>

#include "cache/slot_file.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/slot_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

// Whether a failed restore drops its file, and why (`what`). llama-server's answer is the same
// for a damaged file and a full KV cache: the file itself tells them apart (cache/slot_file).
awaitable<bool> drop_after_failure(net::any_io_executor index_ex, cache::index* idx,
                                   const cache::snapshot& s, const upstream::call_end& r,
                                   const char*& what) {
    const cache::slot_call_result result{!r.answered, r.status, r.body};
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

// Waits while another request holds a lease on `key`: it is saving the prefix (then its file is
// found afterwards) or restoring it (a short wait, for nothing). Polls; at most as long as one
// slot call may take (`limit`: cache.slot_call_timeout). True when it waited.
awaitable<bool> disk_tier::wait_for_save(const std::string& key, std::chrono::milliseconds limit) {
    if (leases_.count(key) == 0) co_return false;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    net::steady_timer timer(co_await net::this_coro::executor);
    while (leases_.count(key) > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(50));
        co_await timer.async_wait(nothrow);
    }
    co_return true;
}

awaitable<disk_action> disk_tier::restore(const request_scope& rq, routing::ticket& t,
                                          const prefix& p, const cache::snapshot& s) {
    upstream::slot_client llama(rq.pool, rq.cfg, t.p.backend);
    const auto& b = llama.backend();
    auto* idx = p.index;
    const routing::work_mark restoring(reg_, t.p.backend, *t.p.slot, routing::slot_work::restoring,
                                       s.tokens);
    const auto called = std::chrono::steady_clock::now();
    const auto r = co_await llama.restore(*t.p.slot, s.file);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - called;
    disk_action a;
    a.key = p.key;
    if (!r.value) {
        // What the slot holds now is unknown (llama-server wipes it when a file does not load;
        // a restore that timed out may still run): believed empty.
        reg_.set_held(t, {}, 0);
        a.what = disk_action::kind::restore_failed;
        const char* what = "file kept";
        a.file_dropped = co_await drop_after_failure(index_ex_, idx, s, r.end, what);
        log()->warn("restoring {} into {} slot {} failed ({}): {}, recomputing", s.file, b.name,
                    *t.p.slot, r.end.what(), what);
        if (a.file_dropped) {
            co_await on_index(index_ex_, [idx, key = p.key] {
                idx->drop(key);
                return true;
            });
        }
        co_return a;
    }
    a.what = disk_action::kind::restored;
    // A file saved after an answer holds the prompt and the answer after the prefix its row
    // covers: what it vouches for is the prefix.
    a.tokens = std::min<std::uint64_t>(r.value->tokens, s.tokens);
    const double ms = r.value->ms;
    reg_.set_held(t, p.levels, a.tokens);
    {
        std::lock_guard lock(mu_);
        backends_[t.p.backend].restores.observe(s.bytes, ms);
    }
    if (on_restore_) on_restore_(t.p.backend, took.count());
    co_await on_index(index_ex_, [idx, key = p.key, ms] {
        idx->touch(key, unix_now(), ms);
        return true;
    });
    co_return a;
}

}  // namespace warmslot::tier
