// What warmslot believes about every backend and slot, and the counters of what the cache did.
//
// One registry per process, shared by all workers: every public member locks its mutex, so it
// is thread-safe. Planning and reserving the chosen slot happen under one lock, so two requests
// can never pin the same slot. No I/O here: the service layer feeds it observations (responses'
// timings, GET /props, GET /slots) and asks it for plans.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/timings.hpp"
#include "routing/planner.hpp"

namespace warmslot::routing {

// A plan that holds a reservation: while it lives in flight, its slot counts as busy.
struct ticket {
    plan p;
    std::uint64_t id = 0;
    std::uint64_t request_bytes = 0;
    double expected_prefill_seconds = 0;  // of the part of the prompt the slot does not hold
    double saved_prefill_seconds = 0;     // of the part it holds: the most a wait is worth
    // Sent without id_slot (an API whose body llama-server rebuilds, dropping it): llama-server
    // picks the slot by prompt similarity, and the planned slot is where warmslot prepared the
    // prefix (set by mark_floating).
    bool floating = false;
    // Unpinned (no slot planned) and may take a slot there: a chat or completion task, as
    // opposed to /tokenize or /props. While one runs, no slot of its backend is pinned.
    bool takes_slot = true;
    // The tenant whose request this is: its slot's owner once it holds the request's prefix.
    std::string tenant;
};

// What GET /props and /v1/models said about a backend.
struct backend_info {
    int total_slots = 0;
    std::uint64_t n_ctx_per_slot = 0;
    std::string build_info;
    std::string model_path;
    std::string model_type;           // model_ftype of /props
    std::string model_meta;           // shape facts of /v1/models (parameters, size, vocabulary)
    std::string lora;                 // adapters and their scales (GET /lora-adapters)
    std::vector<std::string> models;  // ids from /v1/models and the alias
    std::string architecture;         // general.architecture of the model file, "" when out of
                                      // sight (warmslot cannot read the file)
    bool sliding_window = false;      // the file says its attention has a sliding window
    std::string identity;             // what slot files must match to load here (model file,
                                      // its size and time when visible, build, slots, context,
                                      // adapters, KV flags: routing/observations.hpp)
};

// One slot as GET /slots shows it.
struct observed_slot {
    int id = 0;
    bool processing = false;
    std::optional<std::uint64_t> n_prompt_tokens;  // absent for a slot that never ran a task
    std::optional<std::int64_t> task;              // id of its last task (absent: never ran one)
};

// Prometheus-style counters.
struct counters {
    std::uint64_t requests_by_route[static_cast<int>(route::pass_through) + 1] = {};
    std::uint64_t prompt_tokens_processed = 0;
    std::uint64_t prompt_tokens_reused = 0;
    double prefill_seconds_saved = 0;
    std::uint64_t mispredictions = 0;  // a hit was planned but the server reused far less
    std::uint64_t corrections = 0;     // beliefs corrected from GET /slots or a restart
    // Gauges, filled by totals(): tickets not ended yet (running, waiting or preparing), and
    // slots a ticket reserves now. Both are 0 whenever warmslot is idle.
    std::uint64_t in_flight = 0;
    std::uint64_t reserved_slots = 0;
};

class registry {
  public:
    registry(std::vector<std::string> backend_names, planner_settings settings);

    // A config reload: `names` lists every backend by index (the registry grows to match, it
    // never shrinks: indexes are stable), a `retired` one takes no new plans and keeps what it
    // knows in case it comes back; `settings` replaces the planner settings.
    void sync(const std::vector<std::string>& names, const std::vector<bool>& retired,
              planner_settings settings);

    static constexpr std::size_t all_backends = std::numeric_limits<std::size_t>::max();

    // Called (outside the lock, from any thread) after every change that may let a waiter go
    // on: a slot released or completed, a backend checked, its health changed. It must not call
    // back into the registry. Set once before serving; nullptr clears it.
    void set_listener(std::function<void()> f);
    // Called (outside the lock) by want_check with the backend to check: the monitor's. Set
    // once before serving; nullptr clears it.
    void set_check_listener(std::function<void(int)> f);

    // Plans a request and reserves the chosen slot (unless the plan is to wait for it).
    // allow_wait false: never plan to wait for a busy slot (after a wait that gave up).
    // `backends`: only the first this many are candidates (the caller's config snapshot may be
    // older than the registry after a reload). `takes_slot`: see ticket::takes_slot.
    // `tenant`: whose request it is (ticket::tenant). `isolated` (cache.isolation: tenant): a
    // slot another tenant's request filled holds nothing this request may reuse; it stays worth
    // what it holds as a victim (rule 6 of `choose`), and no prefix counts as evicted.
    ticket reserve(const fingerprint* fp, std::string_view model, std::uint64_t request_bytes,
                   clock::time_point now, bool allow_wait = true,
                   std::size_t backends = all_backends, bool takes_slot = true,
                   std::string_view tenant = {}, bool isolated = false);
    // What reserve would plan now, without reserving anything (POST /warmslot/explain).
    // `tenant` non-null: planned as if every slot another tenant's request filled were empty and
    // no prefix had been evicted, so the plan tells the caller nothing of other tenants' prompts;
    // with `isolated`, as reserve plans under isolation (those slots keep their value).
    plan preview(const fingerprint* fp, std::string_view model, clock::time_point now,
                 const std::string* tenant = nullptr, bool isolated = false) const;

    // A request sent to `backend` without a plan for it (failover): counted like an unpinned
    // ticket, so no slot there is pinned while it runs. end_unpinned when it is over.
    void begin_unpinned(int backend);
    void end_unpinned(int backend);

    // Checks of a backend by the monitor (GET /props and /slots). want_check: a request saw a
    // sign of a restart (a dead pooled connection, a refused connect) or found no backend
    // ready; until a check that starts after this call is done, the backend takes no plans.
    // Returns the checks_done value to wait for (0 without a check listener: no monitor runs).
    std::uint64_t want_check(int backend);
    std::uint64_t checks_done(int backend) const;
    void check_started(int backend);
    void check_done(int backend);
    // For a wait_hit ticket: takes the slot if it is idle now. False: still busy.
    bool try_take(ticket& t, clock::time_point now);
    // The ticket's request goes out without id_slot. While it runs, no slot of its backend is
    // pinned or taken by a wait (it may be on any idle one), and its answer updates the planned
    // slot only when it reused a prefix (the slot that held it is the one llama-server chose).
    void mark_floating(ticket& t);
    // Floating requests sent on `backend` and not yet seen running on their planned slot; 0
    // while an unpinned request runs there (nothing then tells where it runs). `newest`: when
    // the last of them was sent.
    std::size_t unsettled_floating(int backend, clock::time_point* newest = nullptr) const;
    // A reading of GET /slots: when every floating request sent on `backend` runs on the slot it
    // was planned on as far as the reading tells (that slot processing, and no answer of
    // warmslot's ended there in the last moments, whose tail it might still be), they are
    // known to run there: their slots stay busy and the backend's other slots are known again,
    // so later requests are planned on them (pinned, their prefix restored) rather than sent
    // unpinned into whatever slot is free. All or none: with as many unknown requests as
    // processing planned slots, none of them can run elsewhere. True when some settled.
    bool settle_floating(int backend, const std::vector<observed_slot>& slots,
                         clock::time_point now);
    // A floating ticket's request is expected on `slot` rather than its planned one (it shares
    // more of the prompt there): the reservation moves there when that slot is idle and nobody
    // else's, and the planned one is given back as it was. False: it stays.
    bool move_reservation(ticket& t, int slot);
    // Gives up a reservation without a response (request failed before reaching the slot).
    void cancel(const ticket& t);
    // Records the response: what the slot now holds, rates, counters. A response that reused
    // under half of the tokens its plan counted on (at least 256) is a sign that the backend
    // restarted between two checks, or that something else took its slots: want_check, so no
    // later request is planned on beliefs this one just proved wrong before a check is done.
    void complete(const ticket& t, const fingerprint* fp, const std::optional<api::prompt_stats>& s,
                  clock::time_point now);

    // Observations from the backend monitor.
    void set_info(int backend, const backend_info& info, bool pinning);
    void set_healthy(int backend, bool healthy);
    // A supervised backend whose process is stopped or stopping: unhealthy whatever the
    // monitor last saw, until its process runs again (set false by the supervisor at start).
    void set_stopped(int backend, bool stopped);
    // Another program answers on a supervised backend's port (it does not require the key
    // warmslot gave its own process): no request goes there, not even as a last resort.
    void set_foreign(int backend, bool foreign);
    bool foreign(int backend) const;
    // Whether one of the first `backends` backends may be planned on now: healthy and not
    // waiting for a check after a sign of a restart.
    bool any_ready(std::size_t backends) const;
    // A backend that answered before and now does not (connection refused, 503 while its model
    // loads): it is expected back, and requests wait for it (service/forward.cpp,
    // wait_for_backend). Cleared when it is healthy again, or answers but cannot be read.
    void set_returning(int backend, bool returning);
    // Whether one of the first `backends` backends is expected back (set_returning), or is
    // healthy and waits for a check a request asked for (want_check).
    bool any_returning(std::size_t backends) const;
    // A backend that puts itself to sleep after some idle time (llama-server
    // --sleep-idle-seconds: the model is unloaded and every slot with it) has been quiet for
    // nearly that long: it may be asleep by now. A request first has it checked (the monitor
    // then sees it asleep and forgets its slots), so it is planned on what they hold.
    void set_drowsy(int backend, bool drowsy);
    bool drowsy(int backend) const;
    // Its model is not loaded (a llama-server asleep, or a router's model the router unloaded
    // or never loaded): its slots are empty, and the next request loads it.
    void set_asleep(int backend, bool asleep);
    bool asleep(int backend) const;
    void reconcile(int backend, const std::vector<observed_slot>& slots, clock::time_point now);
    void forget_all(int backend);  // restart detected: nothing is held any more
    // The slot of a reserved ticket now holds exactly `levels` (`tokens` tokens): after a
    // restore from disk or a priming, before the request itself runs.
    void set_held(const ticket& t, std::vector<prefix_level> levels, std::uint64_t tokens);
    // Records what warmslot's own work does on a slot now (slot_view::work), for status;
    // slot_work::none when it is over. Use routing::work_mark.
    void set_work(int backend, int slot, slot_work w, std::uint64_t total);
    // What a slot does now and the prompt tokens done so far (slot_view::work, work_done);
    // {none, 0} for an unknown slot.
    std::pair<slot_work, std::uint64_t> work_of(int backend, int slot) const;

    // Reserves `count` idle slots of `backend` for warmslot's own use of them (the monitor's probe
    // of slot stability): all or none. Never a slot with a ticket or seen processing, and none
    // while an unpinned or floating request runs there. Give them back with release().
    std::vector<ticket> reserve_idle(int backend, std::size_t count);

    // Reserves one given slot for warmslot's own work on it (saving it to disk, erasing it), only
    // when it is idle (no ticket, not seen processing) and still holds `must_hold` as a prefix of
    // what it holds (empty: whatever it holds). std::nullopt: busy, or it holds something else
    // now. Never plans, never waits. `seen_idle`: the caller has just seen the slot idle on the
    // server, so requests llama-server places itself (floating, unpinned) are no reason to refuse.
    std::optional<ticket> reserve_idle_slot(int backend, int slot,
                                            const std::vector<prefix_level>& must_hold,
                                            bool seen_idle = false);
    // Ends a ticket keeping what its slot is believed to hold (cancel forgets it): a
    // reservation of reserve_idle_slot, or a request's whose bytes never reached the slot.
    // Callers own tickets through routing::reservation (routing/reservation.hpp), which ends
    // each exactly once.
    void release(const ticket& t);

    // Slots whose KV a request with its own adapters (`lora`) may have computed
    // (routing/registry_adapters.cpp): llama-server clears a slot's cache only for a task that
    // names adapters, so a task without them, or warmslot's priming, would reuse that KV as the
    // base model's. `slot` std::nullopt: any slot of the backend (llama-server chose it).
    void mark_adapter(int backend, std::optional<int> slot);
    // Whether `slot` was marked; unmarks it (the caller erases it).
    bool take_adapter(int backend, int slot);
    // Reserves a marked slot that is idle, to erase it; std::nullopt: none is both.
    std::optional<ticket> reserve_marked_idle(int backend);
    // The ticket's slot is being prepared (restored, primed, saved) through several calls,
    // between which llama-server sees it idle: a request sent without id_slot could take it
    // there (its task queued until a slot frees, or picked among idle ones). Such requests wait
    // while `preparing` says so (service/send.cpp); the mark ends with the ticket, or with
    // set_preparing(t, false) once llama-server has started the request itself.
    void set_preparing(const ticket& t, bool on);
    bool preparing(int backend) const;

    // Order among requests llama-server places itself. It gives a floating request the idle
    // slot sharing the most of its prompt, ties to the lower id: sent while a lower slot holds
    // the same prefix for another ticket whose request has not started there, it runs on that
    // slot (and the other then queues behind it). `sending`: the ticket's request is written to
    // llama-server now. `ahead`: the slots of `backend` reserved by other tickets that hold at
    // least `request`'s stable prefix, or are being prepared for a request that shares it: those
    // below `slot` when `slot` holds the prefix (ties go to the lower id), all of them when it
    // does not. Whether one has not sent its request yet, and when the others did (the caller
    // checks with GET /slots that they run). Woken by sending, preparations ending and tickets
    // ending.
    struct ahead_state {
        bool unsent = false;
        std::vector<std::pair<int, clock::time_point>> sent;  // slot, when its request went
        bool empty() const { return !unsent && sent.empty(); }
    };
    // A request waiting for its turn (service/floating_order.cpp) marks its slot meanwhile. Two
    // such requests may each count the other's slot as ahead (one holds its prefix, the other
    // does not); among two that wait for each other only the lower slot counts as ahead, so
    // one of them goes. A higher one that waits, but not for this slot, stays ahead.
    void sending(const ticket& t, clock::time_point now);
    ahead_state ahead(int backend, int slot, const fingerprint& request) const;
    void set_waiting_turn(const ticket& t, bool on);

    std::vector<backend_view> snapshot() const;
    // Whether one of the first `backends` backends has a slot a plan could pin now: healthy, no
    // request placed by llama-server in flight there, the slot neither reserved nor busy.
    bool has_idle_slot(std::size_t backends = all_backends) const;
    // Whether `backend` has a slot that no ticket holds and GET /slots did not last see busy:
    // llama-server runs a request sent there now at once (it may be one a request placed by
    // llama-server runs on, until the next check says so). False when every slot is taken:
    // a request sent now would wait in llama-server's queue.
    bool has_free_slot(int backend) const;
    counters totals() const;
    std::optional<backend_info> info(int backend) const;
    // Backends serve more than one model file. Without the lock: kept up to date whenever a
    // backend's info or retirement changes.
    bool multi_model() const { return multi_model_.load(std::memory_order_acquire); }

  private:
    struct backend_state {
        backend_view view;
        std::optional<backend_info> info;
        std::vector<std::uint64_t> reserved_by;  // per slot: ticket id holding it, 0 = none
        std::vector<bool> outside_busy;          // per slot: processing without our ticket
        std::vector<bool> preparing;             // per slot: its ticket works on it before
                                                 // its request (restore, priming, save)
        std::vector<clock::time_point> sent_at;  // per slot: when its ticket's request went
        std::vector<bool> waiting_turn;          // per slot: its ticket waits for its turn
        std::vector<std::vector<prefix_level>> planned_for;  // per slot: its ticket's request
        std::vector<bool> floating_slot;     // per slot: its ticket's request is floating
        std::vector<bool> settled;           // per slot: and seen running there
        std::size_t unpinned_in_flight = 0;  // unpinned requests that may take a slot
        std::size_t unpinned_other = 0;      // unpinned ones that take none (/tokenize, ...)
        std::size_t floating_in_flight = 0;  // requests on a slot llama-server chose
        std::deque<std::uint64_t> evicted;   // level hashes this backend held lately (its
                                             // RAM cache or disk may still have them)
        bool rate_learned = false;           // prefill rate observed
        bool tpb_learned = false;            // tokens per byte observed
        bool retired = false;                // removed by a reload: never planned
        bool stopped = false;                // supervised process not running
        bool foreign = false;                // see set_foreign
        bool returning = false;              // see set_returning
        bool drowsy = false;                 // see set_drowsy
        bool asleep = false;                 // see set_asleep
        std::uint64_t checks_started = 0;    // monitor checks begun and finished
        std::uint64_t checks_done = 0;
        std::uint64_t trusted_after = 0;  // no plans until checks_done reaches this
    };
    // llama-server may still show a slot as processing for a moment after it sent the response.
    static constexpr auto own_tail = std::chrono::milliseconds(300);
    // Slots of `b` whose state is unknown: a request runs there on a slot llama-server chose.
    static bool slots_unknown(const backend_state& b) {
        return b.floating_in_flight > settled_count(b) || b.unpinned_in_flight > 0;
    }
    static std::size_t settled_count(const backend_state& b);
    bool settle_locked(backend_state& b, const std::vector<observed_slot>& slots,
                       clock::time_point now);
    void notify();  // calls the listener; never under mu_
    // The bodies of complete and reconcile (they lock mu_; their callers notify after).
    // record_complete returns true when a planned reuse did not happen (a misprediction).
    bool record_complete(const ticket& t, const fingerprint* fp, const api::prompt_stats& s,
                         clock::time_point now);
    void apply_reconcile(int backend, const std::vector<observed_slot>& slots,
                         clock::time_point now);
    void end_unpinned_locked(backend_state& b, const ticket& t);
    void unreserve_locked(backend_state& b, std::size_t slot);
    std::optional<std::size_t> end_ticket_locked(const ticket& t);
    void evicted(backend_state& b, const std::vector<prefix_level>& levels);
    plan plan_locked(const fingerprint* fp, std::string_view model, clock::time_point now,
                     bool allow_wait, std::size_t backends = all_backends,
                     const std::string* tenant = nullptr, bool isolated = false) const;
    ticket reserve_locked(ticket t, clock::time_point now);
    plan prefer_previous_backend(const plan_input& in, const std::vector<backend_view>& views,
                                 plan p) const;
    slot_view* slot_of(backend_state& b, int id);
    void update_multi_model_locked();

    mutable std::mutex mu_;
    std::mutex listener_mu_;  // taken after mu_ is released, never together
    std::function<void()> listener_;
    std::function<void(int)> check_listener_;
    std::atomic<bool> multi_model_{false};
    planner_settings settings_;
    std::vector<backend_state> backends_;
    std::vector<std::uint64_t> evicted_view_;  // the last max_evicted level hashes evicted
    std::size_t evicted_next_ = 0;             // where the next one goes once it is full
    mutable std::vector<backend_view>
        views_;  // the planner's working copy of the views (under mu_)
    counters counters_;
    std::uint64_t next_ticket_ = 1;
    std::set<std::pair<int, int>> adapter_kv_;  // (backend, slot): see mark_adapter
};

// Marks a slot as doing `w` for as long as it lives (registry::set_work).
class work_mark {
  public:
    work_mark(registry& reg, int backend, int slot, slot_work w, std::uint64_t total)
        : reg_(reg), backend_(backend), slot_(slot) {
        reg_.set_work(backend_, slot_, w, total);
    }
    ~work_mark() { reg_.set_work(backend_, slot_, slot_work::none, 0); }
    work_mark(const work_mark&) = delete;
    work_mark& operator=(const work_mark&) = delete;

  private:
    registry& reg_;
    int backend_;
    int slot_;
};

}  // namespace warmslot::routing
