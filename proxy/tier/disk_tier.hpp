// The disk tier: keeps long stable prefixes (system prompt and documents, the part before the
// final user turn) as llama-server slot files that hold exactly that prefix, and restores them
// into the slot a request was planned on when no slot holds its prefix any more.
//
// A file holding exactly a prefix P restores usefully on every model kind, hybrid ones included
// (llama-server.md section 4): the request P + question then extends it. Files are named by a
// content address of (backend identity, prefix fingerprint), so a file never loads into another
// model. The SQLite index runs on its own thread; the slot calls run on the request's worker.
// Nothing here ever fails a client request: every problem falls back to recomputing.
#pragma once

#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "api/errors.hpp"
#include "cache/disk_policy.hpp"
#include "cache/index.hpp"
#include "cache/leases.hpp"
#include "cache/replica_file.hpp"
#include "cache/rollback.hpp"
#include "cache/split_points.hpp"
#include "cache/token_key.hpp"
#include "cache/token_parts.hpp"
#include "config/config.hpp"
#include "config/source.hpp"
#include "net/beast.hpp"
#include "routing/registry.hpp"
#include "tier/disk_reports.hpp"
#include "tier/request_scope.hpp"
#include "upstream/pool.hpp"
#include "upstream/slot_client.hpp"

namespace boost::asio {
class thread_pool;
}

namespace warmslot::tier {

namespace disk_detail {
struct shared_state;
}

class disk_tier {
  public:
    // Opens one index per distinct slot directory (may throw at start-up). `file_ex` runs the
    // copies of slot files between directories (a thread of its own: a copy may take seconds).
    disk_tier(const config::source& src, routing::registry& reg, net::any_io_executor index_ex,
              net::any_io_executor file_ex);
    // Waits for the shared tier's calls, unless one of them hangs (then its threads are left
    // to the end of the process).
    ~disk_tier();
    disk_tier(const disk_tier&) = delete;
    disk_tier& operator=(const disk_tier&) = delete;
    // After a reload: opens the indexes of slot directories that are new (blocking: call it
    // off the I/O threads). A directory that cannot be opened is logged and left without tier.
    void sync();

    bool enabled_for(int backend) const;

    // A chat request's prompt tokens as the backend renders them (/apply-template, /tokenize),
    // chained under its identity (and, under tenant isolation, `tenant`: cache::key_scope);
    // std::nullopt when the request is too short for any file, the tier is off for the backend,
    // or the backend refuses to render it. Called before the slot's state is trusted: its calls
    // are the first to meet a restarted backend.
    awaitable<std::optional<cache::token_chain>> request_tokens(const request_scope& rq,
                                                                int backend,
                                                                const routing::fingerprint& fp,
                                                                const nlohmann::json& body,
                                                                const std::string& tenant);

    // Before a chat request planned on a slot runs, with its tokens: restore the longest file
    // that holds a prefix of them when the slot does not hold it, or prime the slot with a
    // prefix worth a file (a learned split point, or the stable messages) and save it. A file it
    // saves is charged to `tenant` (the caller's): over that tenant's budget
    // (cache.tenant_max_disk), that tenant's files are evicted.
    //
    // `save_after_answer` (a streamed request pinned to its slot): on a model that cuts its KV
    // anywhere (full attention), a prefix due for a file is not primed and saved before the
    // request but left to save_after_answer: the client's first token comes as soon as it would
    // straight from llama-server, and the file then holds the prompt and the answer, whose first
    // tokens are the prefix (a restore of it serves any prompt that starts with the prefix).
    // Hybrid and recurrent models, whose files must end exactly at the prefix, and models whose
    // architecture is not known yet, are primed and saved before the request as always. A
    // floating request (Messages) primes and saves before it all the same; it and a pinned one
    // both get a conversation file after the answer (cache.conversation_files, see
    // conversation_due).
    awaitable<disk_action> prepare(const request_scope& rq, routing::ticket& t,
                                   const routing::fingerprint& fp, const nlohmann::json& body,
                                   const cache::token_chain& chain, std::string tenant,
                                   bool save_after_answer = false);

    // After the answer of a request whose prepare() left a file due (`a.save_due`), with its
    // reservation still held: saves the slot when it still holds the request's prompt
    // (`prompt_tokens`) followed by its answer (up to `answer_tokens`: GET /slots counts the
    // KV's tokens), and indexes the file under the prefix. Returns `a` with what was done
    // (kind::snapshotted, after_answer). Never throws.
    awaitable<disk_action> save_after_answer(const request_scope& rq, routing::ticket& t,
                                             disk_action a, std::uint64_t prompt_tokens,
                                             std::uint64_t answer_tokens);
    // The file due on (backend, slot) is not saved: the request failed or went elsewhere.
    void forget_due(int backend, int slot);

    // A floating request (llama-server chooses its slot) whose planned slot now holds its
    // stable prefix: erases the idle slots llama-server would choose instead
    // (routing::floating_rivals). `chain` (the request's tokens) and `prepared` (the slot was
    // restored or primed for it, so it holds exactly a prefix of them): on a model that rolls
    // back to checkpoints only, an idle slot that may share as many tokens (token_rival) is
    // erased too; there the request would recompute its whole prompt. Never throws.
    awaitable<void> clear_rivals(const request_scope& rq, const routing::ticket& t,
                                 const routing::fingerprint& fp, const cache::token_chain* chain,
                                 bool prepared);

    // Tenant isolation (cache.isolation: tenant): the slot `t` reserves, which another tenant's
    // request filled, is given to `t`'s tenant empty. Its valuable prefix is saved first when it
    // is not on disk yet (charged to `t.tenant`, as any save one tenant's request causes of what
    // another's left), then it is erased. The slot need not be `t`'s planned one: a reservation
    // of reserve_idle_slot works too. Never throws.
    struct hand_over_result {
        bool emptied = false;      // the slot holds nothing now
        std::uint64_t primed = 0;  // prompt tokens llama-server computed to save the prefix
    };
    awaitable<hand_over_result> hand_over(const request_scope& rq, routing::ticket& t);

    // After the response: judges whether the restore was useful. Several useless ones in a row
    // mean this backend cannot restore usefully (e.g. a sliding-window model without
    // --swa-full): restores pause there, for longer each time (cache::restore_judge).
    void check(int backend, const disk_action& a, const std::optional<api::prompt_stats>& s);

    // Prompt tokens llama-server computed for warmslot's priming since start (every backend).
    std::uint64_t primed_tokens_total() const {
        return primed_total_.load(std::memory_order_relaxed);
    }

    // Files found in another backend's slot directory since start, by what became of them
    // (linked, copied, or why not).
    std::uint64_t replica_files_total(cache::bring_result r) const {
        return replica_results_[static_cast<std::size_t>(r)].load(std::memory_order_relaxed);
    }

    // The shared tier's calls since start, by "op/result" (op: publish or fetch), and the
    // entries this warmslot evicted there (tier/disk_shared.cpp).
    std::map<std::string, std::uint64_t> shared_files_total() const;
    std::uint64_t shared_evictions_total() const;

    // Saves every idle slot of `backend` whose stable prefix (the last one a request brought to
    // it) is long enough and not on disk yet, e.g. because it was used fewer than
    // snapshot_after_uses times: the slot is primed with exactly that prefix and saved, like a
    // snapshot on the request path. Busy slots are skipped, never pinned. Called before a
    // backend stops and by POST /admin/snapshot. Never throws. A file is charged to
    // `charge_to` when given (the tenant whose request made the backend stop: a swap), else to
    // the tenant whose request brought the prefix to the slot.
    awaitable<save_report> save_valuable(const request_scope& rq, int backend,
                                         std::optional<std::string> charge_to = std::nullopt);

    // Primes an idle slot of a backend serving the chat request `body` with its stable prefix
    // (everything before the final user turn) and saves it, ignoring snapshot_after_uses.
    // `model` is the name to route by ("" = any backend); the file is charged to `tenant`.
    // POST /admin/warm.
    // `watch` (may be null) follows the priming and save of the prefix.
    awaitable<std::variant<slot_report, warm_error>> warm(const request_scope& rq,
                                                          nlohmann::json body, std::string model,
                                                          std::string tenant,
                                                          warm_watch* watch = nullptr);

    // Every open index's files (tier/disk_listing.cpp): read on the index thread only when an
    // index changed since the last read, and by one caller at a time; the others get the last
    // listing. So status polls never queue up in front of requests' index work.
    awaitable<std::vector<disk_listing>> listing();
    // How often listing() has read the indexes since start.
    std::uint64_t listing_reads() const { return listing_reads_.load(std::memory_order_relaxed); }

    // Called after each restore that loaded a file, with the backend and the restore's wall
    // seconds (the swap groups time the first restore after a swap in). Set before serving.
    using restore_fn = std::function<void(int backend, double seconds)>;
    void on_restore(restore_fn f) { on_restore_ = std::move(f); }

  private:
    struct prefix;  // tier/disk_prefix.hpp
    // The stable messages (before the final user turn) when their estimated tokens reach
    // cache.min_prefix_tokens; its tokens and key are not known yet (place_tokens).
    std::optional<prefix> stable_prefix(const config::config& cfg, int backend,
                                        const routing::fingerprint& fp, const nlohmann::json& body);
    // The request's prompt tokens as the chat endpoint makes them, chained under the backend's
    // identity and, under tenant isolation, the tenant whose request they are; with `stable`,
    // its stable messages' token count is learned at the same time (tier/disk_tokens.cpp).
    awaitable<std::optional<cache::token_chain>> request_chain(const request_scope& rq, int backend,
                                                               const nlohmann::json& body,
                                                               const std::string& tenant,
                                                               const prefix* stable = nullptr);
    // request_chain with the stable messages when their count is not remembered yet.
    awaitable<std::optional<cache::token_chain>> chain_and_prefix(const request_scope& rq,
                                                                  int backend,
                                                                  const routing::fingerprint& fp,
                                                                  const nlohmann::json& body,
                                                                  const std::string& tenant);
    std::string placed_key(int backend, const prefix& p) const;
    void remember_placed(const std::string& memo, std::size_t tokens);
    static bool starts(const std::vector<int>& full, const std::vector<int>& part);
    awaitable<std::optional<std::string>> prefix_text(const request_scope& rq, int backend,
                                                      const nlohmann::json& messages,
                                                      const nlohmann::json& body);
    // Fills p's tokens and key from its messages, when they render as a prefix of `chain`.
    awaitable<bool> place_tokens(const request_scope& rq, int backend, prefix& p,
                                 const cache::token_chain& chain);
    // The longest learned split point `chain` passes (recording it), as a prefix; std::nullopt
    // when it has none of at least cache.min_prefix_tokens.
    std::optional<prefix> learned_prefix(const config::config& cfg, int backend,
                                         const cache::token_chain& chain,
                                         const nlohmann::json& body, cache::index* idx);
    // What a miss does once its tokens are known: restore the longest file, then prime and save
    // a longer split point when one is due.
    // `conversation`: a conversation file may be left due (conversation_due); `tenant` is charged.
    awaitable<disk_action> miss(const request_scope& rq, routing::ticket& t,
                                std::optional<prefix> msg, std::optional<prefix> learned,
                                const cache::token_chain& chain, bool judged, bool floating,
                                std::optional<std::size_t> slot_common, bool defer,
                                bool conversation, const std::string& tenant);
    // The steps of a miss (tier/disk_miss.cpp), on its state as it goes.
    struct miss_state;
    awaitable<void> find_for_miss(miss_state& m);
    void choose_due(miss_state& m);
    void prepare_elsewhere(miss_state& m);  // a floating request's
    awaitable<disk_action> restore_found(const request_scope& rq, miss_state& m);
    // The tokens of the longest file in the backend's own directory that holds a start of
    // `chain`; 0 when none does.
    awaitable<std::uint64_t> longest_own_file(int backend, cache::index* idx,
                                              const cache::token_chain& chain);
    // A conversation's own file (cache.conversation_files, tier/disk_after.cpp): on a model that
    // cuts its KV anywhere, the request's whole prompt (to its last whole block) is left due for
    // save_after_answer when it has grown past `have` (the tokens of the longest file holding its
    // start; std::nullopt: looked up) by a quarter of cache.min_prefix_tokens and a quarter of
    // `have`: the disk written per conversation stays within a few times its final size. Sets
    // a.save_due; nothing when a file is due already.
    awaitable<void> conversation_due(const config::config& cfg, routing::ticket& t,
                                     const cache::token_chain& chain,
                                     std::optional<std::uint64_t> have, const std::string& tenant,
                                     disk_action& a);
    // The prefix's file left for save_after_answer on t's slot, when `defer` and the backend's
    // model cuts its KV anywhere; false when it is to be made now.
    bool leave_due(routing::ticket& t, const prefix& p, bool defer);
    // Sets p.checkpoint_at: the tokens of the request's messages before its last user message,
    // when they are a prefix of `chain` shorter than p and longer than the `held` tokens of it
    // the slot already holds.
    awaitable<void> mark_checkpoint(const request_scope& rq, int backend, prefix& p,
                                    const cache::token_chain& chain, std::size_t held);
    // How many leading blocks the prompt last prepared on the slot shares with `chain` (what the
    // slot is believed to hold), or std::nullopt when none is remembered.
    std::optional<std::size_t> slot_common_blocks(int backend, int slot,
                                                  const cache::token_chain& chain) const;
    // For a floating request planned on t's slot: the idle slot of its backend that shares the
    // most tokens with `chain` (whole blocks, by what was last prepared there and is still
    // believed there), and how many; std::nullopt when none shares any (tier/disk_rivals.cpp).
    std::optional<std::pair<int, std::size_t>> token_rival(const routing::ticket& t,
                                                           const cache::token_chain& chain) const;
    // The prefix's file in the backend's own index, else brought from another backend's slot
    // directory (tier/disk_replicas.cpp).
    struct found_file {
        cache::snapshot row;
        std::string from;     // the other backend ("" our own directory)
        std::string brought;  // "linked" or "copied"
        bool shared = false;  // copied from the shared tier
    };
    awaitable<std::optional<found_file>> find_file(const config::snapshot& cfg, int backend,
                                                   const prefix& p, bool allowed);
    awaitable<std::optional<found_file>> from_replica(const config::snapshot& cfg, int backend,
                                                      const prefix& p);
    static std::uint64_t room_for(const config::config& cfg, const prefix& p);
    awaitable<void> index_brought(const config::config& cfg, const prefix& p, cache::snapshot& row);
    // From the shared tier, and publishing to it after a save (tier/disk_shared.cpp).
    awaitable<std::optional<found_file>> from_shared(const config::snapshot& cfg, int backend,
                                                     const prefix& p);
    void publish(const config::snapshot& cfg, int backend, const cache::snapshot& s,
                 const std::filesystem::path& file);
    struct other_index {
        std::string backend;  // named after this backend
        cache::index* index = nullptr;
        bool same_identity = false;  // that backend runs what the asking one runs
    };
    std::vector<other_index> other_indexes(const config::snapshot& cfg, int backend) const;
    awaitable<disk_action> restore(const request_scope& rq, routing::ticket& t, const prefix& p,
                                   const cache::snapshot& s);
    // The slot holds p and more: restore p's file, or keep the slot for a rollback, whichever
    // is expected to cost less (tier/disk_rollback.cpp).
    bool holds_more(const routing::ticket& t, const prefix& p) const;
    awaitable<bool> wait_for_save(const std::string& key, std::chrono::milliseconds limit);
    awaitable<disk_action> restore_or_keep(const request_scope& rq, routing::ticket& t,
                                           const prefix& p, bool judged);
    // `on_demand`: an explicit save (POST /admin/snapshot, /admin/warm, before a stop), which
    // the backoff after failed saves does not hold back.
    awaitable<disk_action> snapshot(const request_scope& rq, routing::ticket& t, const prefix& p,
                                    bool on_demand, warm_watch* watch = nullptr);
    // Whether `key` has a row in `idx`; when not, a file of its name without a row is removed,
    // so that a save makes a new file rather than writing through it (tier/disk_snapshot.cpp).
    awaitable<bool> indexed_or_cleared(cache::index* idx, const std::string& key);
    awaitable<bool> save_file(const request_scope& rq, routing::ticket& t, const prefix& p,
                              std::size_t tokens, cache::snapshot& s);
    awaitable<void> drop_checkpoints(upstream::slot_client& llama, routing::ticket& t,
                                     std::string file, std::uint64_t tokens);
    awaitable<std::optional<std::vector<int>>> prefix_tokens(const request_scope& rq, int backend,
                                                             const nlohmann::json& messages,
                                                             const nlohmann::json& body,
                                                             const std::vector<int>& full);
    awaitable<std::optional<std::string>> rendered_text(const request_scope& rq, int backend,
                                                        const nlohmann::json& body);
    awaitable<std::optional<std::vector<int>>> tokens_of(const request_scope& rq, int backend,
                                                         std::string text);
    // Tokens by parts (tier/disk_tokens.cpp).
    cache::token_parts& parts_for(const std::string& identity);  // under mu_
    awaitable<bool> judge_markers(upstream::slot_client& llama, const std::string& identity,
                                  std::string_view text);
    awaitable<std::vector<std::optional<std::vector<int>>>> tokens_of_all(
        const request_scope& rq, int backend, std::vector<std::string> texts);
    awaitable<std::optional<std::vector<std::vector<int>>>> tokens_by_parts(
        const request_scope& rq, int backend, std::string identity, std::vector<std::string> texts);
    static void log_prompt(const std::vector<int>& tokens, std::size_t bytes, double render_ms,
                           double tokenize_ms);
    cache::index* index_for(int backend) const;
    bool restores_allowed(int backend);
    bool saves_allowed(int backend) const;
    void saved(int backend, bool ok);
    void open_indexes(const config::config& cfg);  // under mu_
    void remember(int backend, int slot, const prefix& p);
    awaitable<slot_report> save_slot(const request_scope& rq, int backend, int slot,
                                     std::optional<std::string> charge_to);
    // `charge_to`: the tenant the file is charged to; std::nullopt: the slot's own.
    awaitable<slot_report> save_reserved(const request_scope& rq, routing::ticket& t,
                                         std::string except_key, bool on_demand,
                                         std::optional<std::string> charge_to);

    const config::source& src_;
    routing::registry& reg_;
    net::any_io_executor index_ex_;
    net::any_io_executor file_ex_;
    mutable std::mutex mu_;
    std::map<std::string, std::unique_ptr<cache::index>> indexes_;  // by slot directory; only grows
    std::map<std::string, std::uint64_t> uses_;  // prefix key -> uses seen (snapshot_after_uses)
    cache::split_points splits_;                 // where prompts part ways, per identity
    std::map<std::string, std::size_t> placed_;  // identity + stable messages' hash -> tokens
    std::map<std::string, cache::token_parts> parts_;  // identity -> its prompts' parts' tokens
    // (backend, slot) -> block chain of the last request prepared there (one per slot), and
    // the last level hash of its fingerprint: believed while the registry believes the slot
    // holds that request (routing::slot_view::held).
    struct slot_prompt {
        std::vector<std::uint64_t> blocks;
        std::uint64_t level = 0;
    };
    std::map<std::pair<int, int>, slot_prompt> slot_blocks_;
    // (backend, slot) -> the prefix whose file is due after the running request's answer.
    std::map<std::pair<int, int>, std::shared_ptr<const prefix>> due_;
    // Files being saved after an answer, key -> tokens: the conversation's next request may come
    // before its file is indexed (the client has the answer first).
    std::map<std::string, std::uint64_t> saving_after_;
    // Waits, at most `limit` (cache.slot_call_timeout), while a file holding a longer prefix of
    // `chain` than `have` tokens is being saved after an answer. True when it waited.
    awaitable<bool> wait_for_saves_of(const cache::token_chain& chain, std::uint64_t have,
                                      std::chrono::milliseconds limit);
    cache::key_leases leases_;  // keys being looked up, saved or restored
    // What the tier learned of one backend from its own calls there, under mu_.
    struct backend_state {
        cache::restore_judge judge;             // are restores useful there
        cache::save_backoff saves;              // saves after failures
        std::optional<double> bytes_per_token;  // of its last saved file
        cache::rollback_memory rollbacks;       // what rollbacks recomputed
        cache::restore_rate restores;           // measured restores
    };
    std::map<int, backend_state> backends_;  // by backend index
    std::atomic<std::uint64_t> primed_total_{0};
    // listing(): the last listing read, the indexes' change counts it was read at, and whether a
    // read is under way.
    std::mutex listing_mu_;
    std::optional<std::vector<disk_listing>> listed_;
    std::vector<std::uint64_t> listed_at_;
    bool listing_now_ = false;
    std::atomic<std::uint64_t> listing_reads_{0};
    std::array<std::atomic<std::uint64_t>, cache::bring_results> replica_results_{};
    restore_fn on_restore_;
    std::shared_ptr<disk_detail::shared_state> shared_;
    // Two threads for the shared tier's calls, started by the first one (none without
    // cache.shared_dir): tier/disk_shared.cpp.
    std::once_flag shared_started_;
    std::unique_ptr<boost::asio::thread_pool> shared_pool_;
    net::any_io_executor shared_executor();
    // Per (backend, slot): the last stable prefix a request brought there, so that it can be
    // saved later (save_valuable). One entry per slot, replaced by the next prefix: memory is
    // bounded by the slot count times the size of one request.
    struct remembered {
        std::string key;
        std::vector<routing::prefix_level> levels;
        std::shared_ptr<const nlohmann::json> body;  // stable messages + the turn after them
        std::string tenant;  // whose request brought it: a save charges that tenant
    };
    std::map<std::pair<int, int>, remembered> slot_prefixes_;
    std::optional<remembered> remembered_at(int backend, int slot) const;
};

}  // namespace warmslot::tier
