#include "routing/swap.hpp"

#include <algorithm>
#include <functional>
#include <tuple>

namespace warmslot::routing::swap {
namespace {

using member_set = std::vector<bool>;  // one flag per member

bool in_use(const member& m) { return m.busy > 0 || m.waiting > 0; }

std::size_t count(const member_set& s) {
    return static_cast<std::size_t>(std::count(s.begin(), s.end(), true));
}

member_set with(member_set s, std::size_t i) {
    s[i] = true;
    return s;
}

// The order in which members are drained: a member nobody uses first, then not the home,
// then the least recently used.
bool better_victim(std::span<const member> members, std::size_t a, std::size_t b) {
    const member& x = members[a];
    const member& y = members[b];
    if (in_use(x) != in_use(y)) return !in_use(x);
    if (x.home != y.home) return !x.home;
    return x.last_use < y.last_use;
}

using may_drain_fn = std::function<bool(std::size_t)>;

// max_running: the best `need` members of `keep` that may be drained.
std::optional<std::vector<std::size_t>> room_by_count(const limits& lim,
                                                      std::span<const member> members,
                                                      const member_set& keep, std::size_t w,
                                                      const may_drain_fn& may_drain) {
    const std::size_t after = count(with(keep, w));
    if (after <= lim.max_running) return std::vector<std::size_t>{};
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < members.size(); ++i) {
        if (keep[i] && i != w && may_drain(i)) candidates.push_back(i);
    }
    const std::size_t need = after - lim.max_running;
    if (candidates.size() < need) return std::nullopt;
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](std::size_t a, std::size_t b) { return better_victim(members, a, b); });
    candidates.resize(need);
    return candidates;
}

// allow: for each allowed set holding `w`, the members of `keep` outside it are the ones to
// drain; among the sets where all of them may be drained, the fewest members, then the fewest
// in use, then the fewest homes, then the one whose most recently used member was used longest
// ago; the first such set in the list on a tie.
std::optional<std::vector<std::size_t>> room_by_sets(const limits& lim,
                                                     std::span<const member> members,
                                                     const member_set& keep, std::size_t w,
                                                     const may_drain_fn& may_drain) {
    std::optional<std::vector<std::size_t>> best;
    std::tuple<std::size_t, std::size_t, std::size_t, clock::time_point> best_key{};
    for (const auto& set : lim.allow) {
        if (std::find(set.begin(), set.end(), w) == set.end()) continue;
        std::vector<std::size_t> drain;
        bool ok = true;
        std::size_t used = 0, homes = 0;
        clock::time_point latest{};
        for (std::size_t i = 0; i < members.size() && ok; ++i) {
            if (!keep[i] || i == w || std::find(set.begin(), set.end(), i) != set.end()) continue;
            ok = may_drain(i);
            drain.push_back(i);
            used += in_use(members[i]) ? 1 : 0;
            homes += members[i].home ? 1 : 0;
            latest = std::max(latest, members[i].last_use);
        }
        if (!ok) continue;
        const auto key = std::make_tuple(drain.size(), used, homes, latest);
        if (best && !(key < best_key)) continue;
        std::stable_sort(drain.begin(), drain.end(), [&](std::size_t a, std::size_t b) {
            return better_victim(members, a, b);
        });
        best = std::move(drain);
        best_key = key;
    }
    return best;
}

// The members to drain so that `keep` minus them, with `w`, may run together; std::nullopt
// when no such members may be drained.
std::optional<std::vector<std::size_t>> make_room(const limits& lim,
                                                  std::span<const member> members,
                                                  const member_set& keep, std::size_t w,
                                                  const may_drain_fn& may_drain) {
    return lim.allow.empty() ? room_by_count(lim, members, keep, w, may_drain)
                             : room_by_sets(lim, members, keep, w, may_drain);
}

// Nobody waits: the home starts when it fits, else takes the place of members idle for
// home_after.
void go_home(const limits& lim, std::span<const member> members, const member_set& running,
             bool freeing, clock::time_point now, decision& out) {
    const auto home =
        std::find_if(members.begin(), members.end(), [](const member& m) { return m.home; });
    if (home == members.end() || home->st != state::stopped || freeing) return;
    const auto h = static_cast<std::size_t>(home - members.begin());
    if (allowed(lim, with(running, h))) {
        out.start.push_back(h);
        return;
    }
    const auto idle = [&](std::size_t i) {
        const member& m = members[i];
        return m.st == state::running && !in_use(m) && now - m.last_use >= lim.home_after;
    };
    if (const auto d = make_room(lim, members, running, h, idle)) out.drain = *d;
}

}  // namespace

std::size_t occupied(std::span<const member> members) {
    return static_cast<std::size_t>(std::count_if(
        members.begin(), members.end(), [](const member& m) { return m.st != state::stopped; }));
}

bool allowed(const limits& lim, const member_set& set) {
    if (lim.allow.empty()) return count(set) <= lim.max_running;
    if (count(set) == 0) return true;
    return std::any_of(lim.allow.begin(), lim.allow.end(), [&](const auto& a) {
        for (std::size_t i = 0; i < set.size(); ++i) {
            if (set[i] && std::find(a.begin(), a.end(), i) == a.end()) return false;
        }
        return true;
    });
}

decision decide(const limits& lim, std::span<const member> members, clock::time_point now) {
    decision out;
    const std::size_t n = members.size();
    std::vector<std::size_t> queue;
    for (std::size_t i = 0; i < n; ++i) {
        if (members[i].st == state::stopped && members[i].waiting > 0) queue.push_back(i);
    }
    std::stable_sort(queue.begin(), queue.end(), [&](std::size_t a, std::size_t b) {
        return members[a].oldest_wait < members[b].oldest_wait;
    });
    // `present`: the members with a process, and those started now. `future`: the members that
    // run once the drains under way and chosen end, and the waiters promised a place.
    member_set present(n, false), future(n, false);
    bool freeing = false;
    for (std::size_t i = 0; i < n; ++i) {
        present[i] = members[i].st != state::stopped;
        future[i] = present[i] && members[i].st != state::draining;
        freeing = freeing || members[i].st == state::draining;
    }
    const auto for_waiter = [&](std::size_t i) {
        const member& m = members[i];
        return m.st == state::running && !(in_use(m) && now - m.started < lim.min_residency);
    };
    for (const std::size_t w : queue) {
        const bool fits_later = allowed(lim, with(future, w));
        if (fits_later && allowed(lim, with(present, w))) {
            out.start.push_back(w);
            present[w] = future[w] = true;
            continue;
        }
        if (!fits_later) {
            const auto d = make_room(lim, members, future, w, for_waiter);
            if (!d) {
                // The waiters behind it wait too: no one overtakes the oldest.
                for (std::size_t i = 0; i < n && !out.held_by; ++i) {
                    const member& m = members[i];
                    if (future[i] && m.st == state::running && !for_waiter(i)) out.held_by = i;
                }
                break;
            }
            for (const auto v : *d) {
                out.drain.push_back(v);
                future[v] = false;
            }
        }
        future[w] = true;  // its place frees when the drains end
    }
    if (queue.empty()) go_home(lim, members, present, freeing, now, out);
    return out;
}

}  // namespace warmslot::routing::swap
