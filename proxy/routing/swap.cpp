#include "routing/swap.hpp"

#include <algorithm>

namespace warmslot::routing::swap {
namespace {

bool in_use(const member& m) { return m.busy > 0 || m.waiting > 0; }

// The member to drain for a waiter, among the running ones not chosen yet.
std::optional<std::size_t> victim(const limits& lim, std::span<const member> members,
                                  const std::vector<bool>& chosen, clock::time_point now,
                                  std::optional<std::size_t>& held_by) {
    std::optional<std::size_t> best;
    const auto better = [&](std::size_t a, std::size_t b) {  // a is a better victim than b
        const member& x = members[a];
        const member& y = members[b];
        if (in_use(x) != in_use(y)) return !in_use(x);
        if (x.home != y.home) return !x.home;
        return x.last_use < y.last_use;
    };
    for (std::size_t i = 0; i < members.size(); ++i) {
        const member& m = members[i];
        if (chosen[i] || m.st != state::running) continue;
        if (in_use(m) && now - m.started < lim.min_residency) {
            if (!held_by) held_by = i;
            continue;
        }
        if (!best || better(i, *best)) best = i;
    }
    return best;
}

}  // namespace

std::size_t occupied(std::span<const member> members) {
    return static_cast<std::size_t>(std::count_if(
        members.begin(), members.end(), [](const member& m) { return m.st != state::stopped; }));
}

decision decide(const limits& lim, std::span<const member> members, clock::time_point now) {
    decision out;
    std::vector<std::size_t> queue;
    for (std::size_t i = 0; i < members.size(); ++i) {
        if (members[i].st == state::stopped && members[i].waiting > 0) queue.push_back(i);
    }
    std::stable_sort(queue.begin(), queue.end(), [&](std::size_t a, std::size_t b) {
        return members[a].oldest_wait < members[b].oldest_wait;
    });
    std::size_t taken = occupied(members);
    // Places being freed already: each is promised to the next waiter in line.
    std::size_t freeing = static_cast<std::size_t>(std::count_if(
        members.begin(), members.end(), [](const member& m) { return m.st == state::draining; }));
    std::vector<bool> chosen(members.size(), false);
    for (const std::size_t w : queue) {
        if (taken < lim.max_running) {
            out.start.push_back(w);
            ++taken;
        } else if (freeing > 0) {
            --freeing;
        } else if (const auto v = victim(lim, members, chosen, now, out.held_by)) {
            chosen[*v] = true;
            out.drain.push_back(*v);
        } else {
            break;  // the waiters behind it wait too: no one overtakes the oldest
        }
    }
    if (!queue.empty()) return out;
    // Nobody waits: return to the home member.
    const auto home =
        std::find_if(members.begin(), members.end(), [](const member& m) { return m.home; });
    if (home == members.end() || home->st != state::stopped || freeing > 0) return out;
    const auto h = static_cast<std::size_t>(home - members.begin());
    if (taken < lim.max_running) {
        out.start.push_back(h);
        return out;
    }
    std::optional<std::size_t> idle;
    for (std::size_t i = 0; i < members.size(); ++i) {
        const member& m = members[i];
        if (m.st != state::running || in_use(m) || now - m.last_use < lim.home_after) continue;
        if (!idle || m.last_use < members[*idle].last_use) idle = i;
    }
    if (idle) out.drain.push_back(*idle);
    return out;
}

}  // namespace warmslot::routing::swap
