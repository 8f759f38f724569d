// Saving slots on demand: the valuable prefixes idle slots hold (before a backend stops, or on
// POST /admin/snapshot), and warm-ups of a prefix no request has brought yet (POST /admin/warm).
// Both prime a slot with exactly the prefix and save it, as the request path does.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "routing/fingerprint.hpp"
#include "routing/reservation.hpp"
#include "tier/disk_prefix.hpp"

namespace warmslot::tier {
using namespace disk_detail;

namespace {

using nlohmann::json;

// The request reduced to what rendering its stable prefix needs: the stable messages and the
// turn after them (to check that the prefix's tokens are a prefix of a whole request's).
std::shared_ptr<const json> stable_body(const json& body, std::size_t stable) {
    json copy = json::object();
    for (const auto& [k, v] : body.items()) {
        if (k != "messages") copy[k] = v;
    }
    const auto& messages = body["messages"];
    copy["messages"] = json::array();
    for (std::size_t i = 0; i <= stable && i < messages.size(); ++i) {
        copy["messages"].push_back(messages[i]);
    }
    return std::make_shared<const json>(std::move(copy));
}

slot_report skipped(const std::string& backend, int slot, std::string reason) {
    slot_report r;
    r.backend = backend;
    r.slot = slot;
    r.reason = std::move(reason);
    return r;
}

}  // namespace

json to_json(const slot_report& r) {
    json j = {{"backend", r.backend}, {"slot", r.slot}, {"saved", r.saved}};
    if (!r.key.empty()) j["key"] = r.key;
    if (r.tokens > 0) j["tokens"] = r.tokens;
    if (r.primed > 0) j["primed"] = r.primed;
    if (!r.reason.empty()) j["reason"] = r.reason;
    return j;
}

json to_json(const save_report& r) {
    json saved = json::array();
    json skipped = json::array();
    for (const auto& s : r.slots) (s.saved ? saved : skipped).push_back(to_json(s));
    return {{"saved", saved}, {"skipped", skipped}};
}

void disk_tier::remember(int backend, int slot, const prefix& p) {
    std::lock_guard lock(mu_);
    auto& m = slot_prefixes_[{backend, slot}];
    if (m.key == p.key && m.body && m.tenant == p.tenant) return;
    m.key = p.key;
    m.tenant = p.tenant;
    m.levels = p.levels;
    m.body = stable_body(*p.body, p.levels.size());
}

std::optional<disk_tier::remembered> disk_tier::remembered_at(int backend, int slot) const {
    std::lock_guard lock(mu_);
    auto it = slot_prefixes_.find({backend, slot});
    if (it == slot_prefixes_.end()) return std::nullopt;
    return it->second;
}

awaitable<slot_report> disk_tier::save_slot(const request_scope& rq, int backend, int slot,
                                            std::optional<std::string> charge_to) {
    slot_report r;
    r.backend = rq.cfg->backends[static_cast<std::size_t>(backend)].name;
    r.slot = slot;
    const auto m = remembered_at(backend, slot);
    if (!m) {
        r.reason = "no long stable prefix seen in this slot";
        co_return r;
    }
    r.key = m->key;
    auto idle = reg_.reserve_idle_slot(backend, slot, m->levels);
    if (!idle) {
        const auto views = reg_.snapshot();
        const auto& view =
            views[static_cast<std::size_t>(backend)].slots[static_cast<std::size_t>(slot)];
        // Never pinned while busy (llama-server.md section 3).
        r.reason = view.busy           ? "busy"
                   : view.held.empty() ? "holds nothing known (e.g. after a restart)"
                                       : "holds another prefix now";
        co_return r;
    }
    routing::reservation t(reg_, std::move(*idle));  // cancelled if the save never ends
    t.preparing(true);
    r = co_await save_reserved(rq, *t, "", true, std::move(charge_to));
    t.release();  // the save kept what the registry believes of the slot up to date
    co_return r;
}

// The slot is reserved by `t`. Saves the stable prefix it was last seen holding, when it still
// holds it, it is not `except_key` (the prefix about to go there) and it is not on disk yet.
awaitable<slot_report> disk_tier::save_reserved(const request_scope& rq, routing::ticket& t,
                                                std::string except_key, bool on_demand,
                                                std::optional<std::string> charge_to) {
    slot_report r;
    r.backend = rq.cfg->backends[static_cast<std::size_t>(t.p.backend)].name;
    r.slot = *t.p.slot;
    const auto m = remembered_at(t.p.backend, *t.p.slot);
    if (!m) {
        r.reason = "no long stable prefix seen in this slot";
        co_return r;
    }
    r.key = m->key;
    if (m->key == except_key) {
        r.reason = "holds the prefix being placed there";
        co_return r;
    }
    const auto views = reg_.snapshot();
    const auto& view =
        views[static_cast<std::size_t>(t.p.backend)].slots[static_cast<std::size_t>(*t.p.slot)];
    if (routing::common_levels(view.held, m->levels) < m->levels.size()) {
        r.reason = "holds another prefix now";
        co_return r;
    }
    try {
        auto* idx = index_for(t.p.backend);
        if (idx == nullptr) {
            r.reason = "no disk tier (cache disabled or no slot_save_path)";
            co_return r;
        }
        const auto found =
            co_await on_index(index_ex_, [idx, key = m->key] { return idx->find(key); });
        if (found) {
            r.reason = "already on disk";
            r.tokens = found->tokens;
            co_return r;
        }
        prefix p;
        p.index = idx;
        p.key = m->key;
        p.levels = m->levels;
        p.messages = json::array();
        const auto& messages = (*m->body)["messages"];
        for (std::size_t i = 0; i < m->levels.size(); ++i) p.messages.push_back(messages[i]);
        p.body = m->body.get();
        p.tenant = charge_to ? *charge_to : m->tenant;
        // Keyed as the owner's request keyed it: under isolation the owner is part of the key.
        const auto chain = co_await request_chain(rq, t.p.backend, *m->body, m->tenant);
        if (!chain || !co_await place_tokens(rq, t.p.backend, p, *chain) || p.key != m->key) {
            r.reason = "its prefix no longer renders to the tokens it had";
            co_return r;
        }
        const auto a = co_await snapshot(rq, t, p, on_demand);
        r.saved = a.what == disk_action::kind::snapshotted;
        r.tokens = a.tokens;
        r.primed = a.primed;
        if (!r.saved) r.reason = "priming or saving the slot failed (see the log)";
    } catch (const std::exception& e) {
        log()->warn("saving slot {} of {} skipped: {}", r.slot, r.backend, e.what());
        r.reason = std::string("error: ") + e.what();
    }
    if (r.saved)
        log()->info("saved {} tokens held by {} slot {} ({})", r.tokens, r.backend, r.slot, r.key);
    co_return r;
}

awaitable<save_report> disk_tier::save_valuable(const request_scope& rq, int backend,
                                                std::optional<std::string> charge_to) {
    save_report rep;
    const std::string name = rq.cfg->backends[static_cast<std::size_t>(backend)].name;
    if (!enabled_for(backend)) {
        rep.slots.push_back(
            skipped(name, -1, "no disk tier (cache disabled or no slot_save_path)"));
        co_return rep;
    }
    if (!restores_allowed(backend)) {
        rep.slots.push_back(skipped(
            name, -1, "restores are paused on this backend (its last restores saved nothing)"));
        co_return rep;
    }
    const auto views = reg_.snapshot();
    for (const auto& s : views[static_cast<std::size_t>(backend)].slots) {
        rep.slots.push_back(co_await save_slot(rq, backend, s.id, charge_to));
    }
    co_return rep;
}

awaitable<std::variant<slot_report, warm_error>> disk_tier::warm(const request_scope& rq, json body,
                                                                 std::string model,
                                                                 std::string tenant,
                                                                 warm_watch* watch) {
    using result = std::variant<slot_report, warm_error>;
    const auto fp = routing::fingerprint_request(routing::request_kind::chat, body);
    if (!fp || fp->stable_levels == 0) {
        co_return result(warm_error{api::error_kind::bad_request, "nothing to warm"});
    }
    // Only backends of this config snapshot are candidates: a reload may grow the registry
    // before the snapshot it indexes.
    const auto cfg = rq.cfg;
    routing::reservation held(
        reg_, reg_.reserve(&*fp, reg_.multi_model() ? model : std::string(), fp->total_bytes,
                           routing::clock::now(), false, cfg->backends.size(), true, tenant,
                           cfg->cache.isolated()));
    auto& t = *held;
    if (t.p.backend < 0) {
        if (t.p.unknown_model) {
            co_return result(
                warm_error{api::error_kind::not_found,
                           "unknown model \"" + model + "\"; GET /v1/models lists them"});
        }
        co_return result(warm_error{api::error_kind::backend_unavailable, "no backend is healthy"});
    }
    const std::string name = cfg->backends[static_cast<std::size_t>(t.p.backend)].name;
    auto refuse = [&](api::error_kind kind, std::string message) {
        held.release();  // nothing ran there, or the steps kept what it holds known
        return result(warm_error{kind, std::move(message)});
    };
    if (!enabled_for(t.p.backend)) {
        co_return refuse(
            api::error_kind::bad_request,
            "backend " + name + " has no disk tier (cache disabled or no slot_save_path)");
    }
    if (!t.p.slot) {
        co_return refuse(api::error_kind::backend_unavailable,
                         "no idle slot on backend " + name + " now; try again later");
    }
    const auto info = reg_.info(t.p.backend);
    if (!info || info->identity.empty()) {
        co_return refuse(api::error_kind::backend_unavailable,
                         "backend " + name + " has not been probed yet; try again later");
    }
    auto p = stable_prefix(*rq.cfg, t.p.backend, *fp, body);
    if (!p) {
        co_return refuse(api::error_kind::bad_request,
                         fmt::format("the prefix is shorter than cache.min_prefix_tokens ({})",
                                     rq.cfg->cache.min_prefix_tokens));
    }
    p->tenant = std::move(tenant);
    const auto chain = co_await request_chain(rq, t.p.backend, body, p->tenant);
    if (!chain || !co_await place_tokens(rq, t.p.backend, *p, *chain)) {
        co_return refuse(api::error_kind::bad_request,
                         "the messages before the final user turn do not render as a prefix of "
                         "the request's tokens on backend " +
                             name);
    }
    slot_report r;
    r.backend = name;
    r.slot = *t.p.slot;
    r.key = p->key;
    held.preparing(true);
    try {
        auto* idx = p->index;
        const auto found =
            co_await on_index(index_ex_, [idx, key = p->key] { return idx->find(key); });
        if (found) {
            held.release();
            r.reason = "already on disk";
            r.tokens = found->tokens;
            co_return result(r);
        }
        // If worth keeping; charged to whoever asked for the warm-up, not the slot's tenant.
        const auto before = co_await save_reserved(rq, t, p->key, true, p->tenant);
        remember(t.p.backend, *t.p.slot, *p);
        const auto a = co_await snapshot(rq, t, *p, true, watch);
        r.primed = before.primed + a.primed;
        if (a.what == disk_action::kind::snapshotted) {
            r.saved = true;
            r.tokens = a.tokens;
            held.release();
            co_return result(r);
        }
    } catch (const std::exception& e) {
        log()->warn("warming a prefix on {} failed: {}", name, e.what());
    }
    co_return refuse(api::error_kind::internal,
                     "priming or saving the slot failed on backend " + name + " (see the log)");
}

}  // namespace warmslot::tier
