// The routing planner. Every choice the planner could make becomes an `option` with a cost in
// seconds (see `choose` in planner.hpp); the cheapest one, with documented tie breaks, becomes
// the plan. Pure: no I/O, no clock but `plan_input::now`.
#include "routing/planner.hpp"

#include <algorithm>
#include <limits>

namespace warmslot::routing {

namespace {

// Costs closer than this are equal, so that table-driven ties do not depend on rounding.
constexpr double cost_epsilon = 1e-9;

const backend_view& defaults() {
    static const backend_view d{};
    return d;
}

double tokens_per_byte(const backend_view& b) {
    return b.tokens_per_byte > 0 ? b.tokens_per_byte : defaults().tokens_per_byte;
}

double prefill_rate(const backend_view& b) {
    return b.prefill_tokens_per_second > 0 ? b.prefill_tokens_per_second
                                           : defaults().prefill_tokens_per_second;
}

double tokens_of(std::uint64_t bytes, const backend_view& b) {
    return static_cast<double>(bytes) * tokens_per_byte(b);
}

double seconds_until(clock::time_point t, clock::time_point now) {
    if (t <= now) return 0;
    return std::chrono::duration<double>(t - now).count();
}

// What reusing one slot would do for the request.
struct slot_match {
    std::size_t matched = 0;         // levels shared
    std::uint64_t saved_tokens = 0;  // tokens of those levels
    double cut_tokens = 0;           // tokens the slot holds beyond them (lost by reusing it)
    bool hit = false;                // saves something and cuts no more than it saves
    bool differs = false;            // the slot holds another level at index `matched`
};

slot_match match_slot(const slot_view& s, const fingerprint& request, const backend_view& b) {
    slot_match m;
    m.matched =
        std::min({common_levels(s.held, request.levels), s.held.size(), request.levels.size()});
    if (m.matched == 0) return m;
    m.differs = s.held.size() > m.matched && request.levels.size() > m.matched;
    const std::uint64_t kept = request.levels[m.matched - 1].bytes;
    const std::uint64_t held = s.held.back().bytes;
    m.saved_tokens = static_cast<std::uint64_t>(tokens_of(kept, b));
    m.cut_tokens = held > kept ? tokens_of(held - kept, b) : 0.0;
    m.hit = m.saved_tokens > 0 && m.cut_tokens <= static_cast<double>(m.saved_tokens);
    return m;
}

bool is_empty(const slot_view& s) { return s.held_tokens == 0 && s.held.empty(); }

std::size_t empty_slots(const backend_view& b) {
    return static_cast<std::size_t>(std::count_if(b.slots.begin(), b.slots.end(), is_empty));
}

// What overwriting the slot throws away, per future use.
double held_value(const slot_view& s, const backend_view& b) {
    const double tokens = s.held_tokens > 0 ? static_cast<double>(s.held_tokens)
                          : s.held.empty()  ? 0.0
                                            : tokens_of(s.held.back().bytes, b);
    return tokens * (1.0 + std::max(0.0, s.recent_hits));
}

// True when `a` (on backend `ab`) is a better slot to overwrite than `b` (on `bb`).
bool better_victim(const slot_view& a, const backend_view& ab, const slot_view& b,
                   const backend_view& bb) {
    if (is_empty(a) != is_empty(b)) return is_empty(a);
    const double va = held_value(a, ab);
    const double vb = held_value(b, bb);
    if (va < vb) return true;
    if (vb < va) return false;
    return a.last_use < b.last_use;
}

// One candidate backend and what the request looks like there.
struct backend_ctx {
    int index = 0;
    const backend_view* view = nullptr;
    double load = 1;       // 1 + in_flight
    double prefill_s = 0;  // the whole request's prefill
    double rate = 1;       // prefill tokens per second
    bool one_off = false;  // a short one-off and the backend has a scratch slot
    std::vector<bool> scratch;
    std::vector<slot_match> matches;
};

backend_ctx make_ctx(const plan_input& in, int index) {
    const backend_view& b = (*in.backends)[static_cast<std::size_t>(index)];
    backend_ctx c;
    c.index = index;
    c.view = &b;
    c.load = 1.0 + static_cast<double>(b.in_flight);
    c.rate = prefill_rate(b);
    c.prefill_s = tokens_of(in.request->total_bytes, b) / c.rate;
    bool any_scratch = false;
    for (const slot_view& s : b.slots) {
        const bool scratch = is_scratch(b, s, in.settings);
        any_scratch = any_scratch || scratch;
        c.scratch.push_back(scratch);
        c.matches.push_back(match_slot(s, *in.request, b));
    }
    c.one_off = any_scratch && is_one_off(*in.request, b, in.settings);
    return c;
}

// Order of preference on equal cost.
enum class kind { hit, miss, pass_through, wait_hit, queue };

struct option {
    const backend_ctx* ctx = nullptr;
    std::size_t slot = 0;  // position in ctx->view->slots; only for hit, wait_hit, miss
    slot_match match;
    kind k = kind::pass_through;
    double cost = 0;
};

option make_option(const backend_ctx& c, kind k, std::size_t slot, double wait) {
    option o;
    o.ctx = &c;
    o.k = k;
    o.slot = slot;
    const bool pinned = k == kind::hit || k == kind::miss || k == kind::wait_hit;
    if (pinned) o.match = c.matches[slot];
    const double saved_s = static_cast<double>(o.match.saved_tokens) / c.rate;
    o.cost = c.load * (c.prefill_s - saved_s + wait);
    return o;
}

// The best idle non-hit slot whose scratch flag equals `scratch`, if any.
std::optional<std::size_t> pick_victim(const backend_ctx& c, bool scratch) {
    std::optional<std::size_t> best;
    const auto& slots = c.view->slots;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].busy || c.matches[i].hit || c.scratch[i] != scratch) continue;
        if (!best || better_victim(slots[i], *c.view, slots[*best], *c.view)) best = i;
    }
    return best;
}

// One-offs: scratch first, then the cheapest other slot. Others: the reverse.
std::optional<std::size_t> victim_for(const backend_ctx& c) {
    if (auto v = pick_victim(c, c.one_off)) return v;
    return pick_victim(c, !c.one_off);
}

// Rule 10: the slot llama-server picks for a request sent without id_slot.
void add_floating_option(const backend_ctx& c, const plan_input& in, std::vector<option>& out) {
    const auto& slots = c.view->slots;
    const double length = std::max(1.0, tokens_of(in.request->total_bytes, *c.view));
    std::optional<std::size_t> by_match, by_age;
    double best = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].busy) continue;
        if (!by_age || slots[i].last_use <= slots[*by_age].last_use) by_age = i;
        if (slots[i].held.empty()) continue;
        const double share = static_cast<double>(c.matches[i].saved_tokens) / length;
        if (share > best && share > floating_similarity) {
            best = share;
            by_match = i;
        }
    }
    const auto chosen = by_match ? by_match : by_age;
    if (!chosen) {
        out.push_back(make_option(c, kind::queue, 0, 0));
        return;
    }
    out.push_back(make_option(c, c.matches[*chosen].hit ? kind::hit : kind::miss, *chosen, 0));
}

void add_options(const backend_ctx& c, const plan_input& in, std::vector<option>& out) {
    const backend_view& b = *c.view;
    if (!b.pinning || b.slots.empty()) {
        out.push_back(make_option(c, kind::pass_through, 0, 0));
        return;
    }
    if (in.request->floating) return add_floating_option(c, in, out);
    bool any_idle = false;
    for (std::size_t i = 0; i < b.slots.size(); ++i) {
        const slot_view& s = b.slots[i];
        any_idle = any_idle || !s.busy;
        if (!c.matches[i].hit) continue;
        if (!s.busy) {
            out.push_back(make_option(c, kind::hit, i, 0));
            continue;
        }
        const double wait = seconds_until(s.busy_until, in.now);
        if (wait <= in.settings.max_wait_seconds) {
            out.push_back(make_option(c, kind::wait_hit, i, wait));
        }
    }
    if (const auto v = victim_for(c)) {
        out.push_back(make_option(c, kind::miss, *v, 0));
    } else if (!any_idle) {
        out.push_back(make_option(c, kind::queue, 0, 0));
    }
}

// Between two hits that save the same: std::nullopt when the session hints and what the slots
// hold beyond the match do not tell them apart (see rule 5 of `choose`).
std::optional<bool> better_hit(const option& a, const option& b, std::uint64_t session) {
    const slot_view& sa = a.ctx->view->slots[a.slot];
    const slot_view& sb = b.ctx->view->slots[b.slot];
    if (session != 0 && (sa.session == session) != (sb.session == session)) {
        return sa.session == session;
    }
    if (a.match.cut_tokens < b.match.cut_tokens - 0.5) return true;
    if (b.match.cut_tokens < a.match.cut_tokens - 0.5) return false;
    if (session != 0) {
        const bool other_a = sa.session != 0 && sa.session != session;
        const bool other_b = sb.session != 0 && sb.session != session;
        if (other_a != other_b) return !other_a;
        if (other_a && sa.last_use != sb.last_use) return sa.last_use < sb.last_use;
    }
    return std::nullopt;
}

// True when `a` is preferred to `b`; on a full tie the earlier option (lower backend index,
// then slot position) stays.
bool better(const option& a, const option& b, std::uint64_t session) {
    if (a.cost < b.cost - cost_epsilon) return true;
    if (b.cost < a.cost - cost_epsilon) return false;
    if (a.k != b.k) return a.k < b.k;
    if (a.match.saved_tokens != b.match.saved_tokens) {
        return a.match.saved_tokens > b.match.saved_tokens;
    }
    if (a.k == kind::hit || a.k == kind::wait_hit) {
        if (const auto h = better_hit(a, b, session)) return *h;
    }
    if (a.k == kind::miss) {
        const slot_view& sa = a.ctx->view->slots[a.slot];
        const slot_view& sb = b.ctx->view->slots[b.slot];
        if (better_victim(sa, *a.ctx->view, sb, *b.ctx->view)) return true;
        if (better_victim(sb, *b.ctx->view, sa, *a.ctx->view)) return false;
        // Equal victims: the backend with more room, so new prefixes spread over replicas.
        const auto ea = empty_slots(*a.ctx->view);
        const auto eb = empty_slots(*b.ctx->view);
        if (ea != eb) return ea > eb;
    }
    return a.ctx->view->in_flight < b.ctx->view->in_flight;
}

bool was_evicted(const fingerprint& request, const std::vector<std::uint64_t>* evicted) {
    if (evicted == nullptr) return false;
    return std::any_of(request.levels.begin(), request.levels.end(), [&](const prefix_level& l) {
        return std::find(evicted->begin(), evicted->end(), l.hash) != evicted->end();
    });
}

// The stable part of the request (document, history) differs from what the slot holds at level
// m: prefill restarts there. A slot that holds only m levels is extended, not diverged.
std::size_t diverged_at(const slot_match& m, const fingerprint& request) {
    const bool diverged = m.matched > 0 && m.differs && m.matched < request.stable_levels;
    return diverged ? m.matched : 0;
}

bool any_hit(const std::vector<backend_ctx>& ctxs) {
    return std::any_of(ctxs.begin(), ctxs.end(), [](const backend_ctx& c) {
        return c.view->pinning && std::any_of(c.matches.begin(), c.matches.end(),
                                              [](const slot_match& m) { return m.hit; });
    });
}

route route_for(const option& o, const plan_input& in, const std::vector<backend_ctx>& ctxs) {
    const std::size_t m = o.match.matched;
    const bool diverged = diverged_at(o.match, *in.request) > 0;
    switch (o.k) {
        case kind::pass_through: return route::pass_through;
        case kind::queue:
            return o.ctx->one_off && !in.request->floating ? route::pass_through
                                                           : route::miss_slot_busy;
        case kind::wait_hit: return route::wait_hit;
        case kind::hit: return diverged ? route::miss_diverged : route::hit;
        case kind::miss: break;
    }
    if (o.ctx->one_off && !in.request->floating) return route::scratch;
    if (m > 0) return diverged ? route::miss_diverged : route::hit;
    if (any_hit(ctxs)) return route::miss_slot_busy;
    if (was_evicted(*in.request, in.recently_evicted)) return route::miss_evicted;
    return route::miss_new_prefix;
}

plan to_plan(const option& o, const plan_input& in, const std::vector<backend_ctx>& ctxs) {
    plan p;
    p.backend = o.ctx->index;
    p.why = route_for(o, in, ctxs);
    if (o.k == kind::hit || o.k == kind::miss || o.k == kind::wait_hit) {
        p.slot = o.ctx->view->slots[o.slot].id;
        p.matched_levels = o.match.matched;
        p.expected_cached_tokens = o.match.saved_tokens;
        p.diverged_at = diverged_at(o.match, *in.request);
    }
    return p;
}

std::vector<int> candidates(const std::vector<backend_view>& backends, std::string_view model) {
    std::vector<int> out;
    for (std::size_t i = 0; i < backends.size(); ++i) {
        if (backends[i].healthy && serves(backends[i], model)) out.push_back(static_cast<int>(i));
    }
    return out;
}

plan least_loaded(const std::vector<backend_view>& backends, const std::vector<int>& cands) {
    plan p;
    for (const int i : cands) {
        const auto& b = backends[static_cast<std::size_t>(i)];
        if (p.backend < 0 ||
            b.in_flight < backends[static_cast<std::size_t>(p.backend)].in_flight) {
            p.backend = i;
        }
    }
    p.why = route::pass_through;
    return p;
}

}  // namespace

std::string_view name(route r) noexcept {
    switch (r) {
        case route::hit: return "hit";
        case route::wait_hit: return "wait_hit";
        case route::miss_new_prefix: return "miss_new_prefix";
        case route::miss_evicted: return "miss_evicted";
        case route::miss_slot_busy: return "miss_slot_busy";
        case route::miss_diverged: return "miss_diverged";
        case route::scratch: return "scratch";
        case route::pass_through: return "pass_through";
    }
    return "unknown";
}

std::vector<int> floating_rivals(const backend_view& b, int planned, const fingerprint& request) {
    std::vector<int> out;
    const auto own = std::find_if(b.slots.begin(), b.slots.end(),
                                  [&](const slot_view& s) { return s.id == planned; });
    if (own == b.slots.end() || request.stable_levels == 0) return out;
    const std::size_t m = common_levels(own->held, request.levels);
    if (m < request.stable_levels) return out;
    const bool own_more = own->held.size() > m;
    // Unknown content shorter than what the planned slot shares cannot share more.
    const double shared_tokens = 0.8 * tokens_of(request.levels[m - 1].bytes, b);
    for (const auto& s : b.slots) {
        if (s.id == planned || s.busy) continue;
        if (s.held.empty()) {
            if (static_cast<double>(s.held_tokens) >= shared_tokens) out.push_back(s.id);
            continue;
        }
        const std::size_t k = common_levels(s.held, request.levels);
        const bool more = s.held.size() > k;
        if (k > m || (k == m && (more || (!own_more && s.id < planned)))) out.push_back(s.id);
    }
    return out;
}

bool serves(const backend_view& b, std::string_view model) noexcept {
    if (b.models.empty() || model.empty()) return true;
    return std::find(b.models.begin(), b.models.end(), model) != b.models.end();
}

bool is_scratch(const backend_view& b, const slot_view& s, const planner_settings& settings) {
    if (!settings.scratch_slot ||
        b.slots.size() < std::max<std::size_t>(2, settings.scratch_min_slots)) {
        return false;
    }
    const bool marked =
        std::any_of(b.slots.begin(), b.slots.end(), [](const slot_view& v) { return v.scratch; });
    if (marked) return s.scratch;
    const auto top =
        std::max_element(b.slots.begin(), b.slots.end(),
                         [](const slot_view& x, const slot_view& y) { return x.id < y.id; });
    return s.id == top->id;
}

bool is_one_off(const fingerprint& request, const backend_view& b,
                const planner_settings& settings) noexcept {
    return tokens_of(request.total_bytes, b) < static_cast<double>(settings.short_request_tokens) &&
           tokens_of(request.longest_segment_bytes, b) <
               static_cast<double>(settings.long_segment_tokens);
}

plan choose(const plan_input& in) {
    plan out;
    if (in.backends == nullptr) return out;
    const auto& backends = *in.backends;
    // Unknown: some backend lists models and none answers to this one (404, not 503).
    const bool known =
        backends.empty() || std::any_of(backends.begin(), backends.end(),
                                        [&](const backend_view& b) { return serves(b, in.model); });
    if (!known) {
        out.unknown_model = true;
        return out;
    }
    const std::vector<int> cands = candidates(backends, in.model);
    if (cands.empty()) return out;
    if (in.request == nullptr) return least_loaded(backends, cands);

    std::vector<backend_ctx> ctxs;  // filled completely before options point into it
    ctxs.reserve(cands.size());
    for (const int i : cands) ctxs.push_back(make_ctx(in, i));
    std::vector<option> options;
    for (const backend_ctx& c : ctxs) add_options(c, in, options);

    // Every candidate adds at least one option: pass_through, a hit, a victim or the queue.
    const option* best = &options.front();
    for (const option& o : options) {
        if (better(o, *best, in.request->session)) best = &o;
    }
    return to_plan(*best, in, ctxs);
}

}  // namespace warmslot::routing
