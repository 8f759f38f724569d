// Restore or roll back: a slot holds a request's stable prefix P and more (another question,
// another conversation on the same document), and P's file is on disk. llama-server reuses the
// slot by rolling back to the common prefix. A plain transformer can cut its KV anywhere: that
// costs nothing. A hybrid (SSM + attention) model can only go back to a context checkpoint at or
// before the divergence; when none is close to P's end (the question shares a user message with
// the document, `--ctx-checkpoints` is low or 0, old checkpoints were pushed out), it recomputes
// tokens of P too, up to all of it. Restoring P's file instead costs the file's read, then the
// request computes exactly what follows P.
//
// llama-server does not say where its checkpoints are, so the cost of a rollback is learned:
// after each kept slot, what llama-server recomputed beyond the part after P (the overshoot) is
// remembered for that prefix, and as a fraction of P for the backend (the guess for prefixes
// not seen yet). Nothing learned yet: the prior (rollback_prior) when the model and settings
// tell it, else a rollback is assumed free (llama-server's own behaviour).
// Pure, no clock, not thread-safe (the disk tier guards it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace warmslot::cache {

// What one choice rests on.
struct rollback_costs {
    double overshoot_tokens = 0;  // expected tokens of P a rollback recomputes
    double prefill_tokens_per_second = 0;
    std::uint64_t file_bytes = 0;
    double restore_bytes_per_second = 0;  // 0: unknown (assumed_restore_bytes_per_second)
};

struct rollback_choice {
    bool restore = false;
    double rollback_seconds = 0;  // the overshoot's prefill
    double restore_seconds = 0;   // reading the file into the slot
    std::string why;              // one line for the header and the access log
};

// Restore when reading the file is expected to cost less than the rollback's overshoot, with a
// margin against noise: the overshoot must be at least `min_overshoot_tokens` and the rollback
// at least `margin` times the restore.
constexpr double min_overshoot_tokens = 32;
constexpr double margin = 1.25;
constexpr double assumed_restore_bytes_per_second = 500e6;  // before any restore or save was timed
rollback_choice choose_restore_or_rollback(const rollback_costs& c);

// What a rollback is known to cost before any was seen, as a fraction of P: a model that can
// only roll back to a context checkpoint (`checkpoints_only`: a hybrid or recurrent one, see
// routing::rolls_back_to_checkpoints_only) run with `--ctx-checkpoints 0` recomputes all of P
// (1.0). Anything else: std::nullopt (learned: with checkpoints, llama-server makes one where
// the request's last user message starts, which is where P ends, and the rollback is cheap).
std::optional<double> rollback_prior(bool checkpoints_only, std::optional<long> ctx_checkpoints);

// What recomputing cost after rollbacks on one backend, bounded in memory.
class rollback_memory {
  public:
    static constexpr std::size_t max_prefixes = 4096;

    // After a request on a slot that was kept holding P and more: llama-server computed
    // `processed` of its `prompt_tokens` prompt tokens, `prefix_tokens` of which are P.
    void observe(const std::string& key, std::uint64_t prefix_tokens, std::uint64_t prompt_tokens,
                 std::uint64_t processed);
    // Tokens of P a rollback is expected to recompute: this prefix's last overshoot, else the
    // backend's learned fraction of P, else the `prior` fraction of P, else 0.
    double expected_overshoot(const std::string& key, std::uint64_t prefix_tokens,
                              std::optional<double> prior = std::nullopt) const;

  private:
    std::map<std::string, double> by_key_;  // key -> last overshoot in tokens
    std::optional<double> fraction_;        // moving average of overshoot / prefix tokens
};

// Bytes per second of restores on one backend, a moving average of measured ones.
class restore_rate {
  public:
    void observe(std::uint64_t bytes, double ms);
    // Measured rate, else the file's own save rate (a save writes the same bytes), else 0
    // (unknown).
    double estimate(std::uint64_t bytes, double save_ms) const;

  private:
    std::optional<double> rate_;
};

}  // namespace warmslot::cache
