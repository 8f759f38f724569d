// Floating requests (Anthropic Messages: llama-server drops their id_slot) run where llama-server's
// own choice puts them. Once the planned slot holds the request's stable prefix, the idle slots
// that would still take the request from it (routing::floating_rivals) are erased, so that the
// request runs where warmslot prepared it.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "routing/observations.hpp"
#include "routing/planner.hpp"
#include "tier/disk_prefix.hpp"
#include "upstream/llama_client.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {
constexpr std::chrono::milliseconds slots_timeout{120'000};  // GET /slots
}  // namespace

awaitable<void> disk_tier::clear_rivals(upstream::pool& pool, const routing::ticket& t,
                                        const routing::fingerprint& fp) {
    if (!t.p.slot || !enabled_for(t.p.backend)) co_return;
    const auto backend = static_cast<std::size_t>(t.p.backend);
    const auto views = reg_.snapshot();
    if (backend >= views.size()) co_return;
    const auto rivals = routing::floating_rivals(views[backend], *t.p.slot, fp);
    if (rivals.empty()) co_return;
    const auto cfg = src_.current();
    const auto& b = cfg->backends[backend];
    // Only slots llama-server itself shows idle: an erase waits for a busy slot, then would
    // clear what its request just computed.
    const auto r = co_await upstream::call(pool, b, http::verb::get, "/slots", "", slots_timeout);
    const auto seen = routing::read_slots(
        r.status == 200 ? nlohmann::json::parse(r.body, nullptr, false) : nlohmann::json());
    if (!seen) co_return;
    for (const int id : rivals) {
        const auto s = std::find_if(seen->begin(), seen->end(),
                                    [id](const routing::observed_slot& o) { return o.id == id; });
        if (s == seen->end() || s->processing) continue;
        const auto e = co_await upstream::call(pool, b, http::verb::post,
                                               fmt::format("/slots/{}?action=erase", id), "{}",
                                               cfg->cache.slot_call_timeout);
        log()->info(
            "{} slot {} erased: it shared as much of a floating request's prompt as slot {}, "
            "where the prefix was prepared ({})",
            b.name, id, *t.p.slot, e.ec ? e.ec.message() : std::to_string(e.status));
    }
}

}  // namespace warmslot::tier
