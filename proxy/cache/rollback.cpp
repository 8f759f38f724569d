#include "cache/rollback.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace warmslot::cache {

namespace {

constexpr double weight = 0.3;  // of a new observation in the moving averages

double blend(const std::optional<double>& old, double value) {
    return old ? (1 - weight) * *old + weight * value : value;
}

}  // namespace

rollback_choice choose_restore_or_rollback(const rollback_costs& c) {
    rollback_choice out;
    const double rate = std::max(1.0, c.prefill_tokens_per_second);
    const double bytes_rate = c.restore_bytes_per_second > 0 ? c.restore_bytes_per_second
                                                             : assumed_restore_bytes_per_second;
    const double overshoot = std::max(0.0, c.overshoot_tokens);
    out.rollback_seconds = overshoot / rate;
    out.restore_seconds = static_cast<double>(c.file_bytes) / bytes_rate;
    out.restore =
        overshoot >= min_overshoot_tokens && out.rollback_seconds > margin * out.restore_seconds;
    out.why = fmt::format(
        "a rollback recomputes ~{:.0f} prefix tokens, {:.3f} s at {:.0f} tokens/s; "
        "the file ({:.1f} MB) restores in {:.3f} s at {:.0f} MB/s{}",
        overshoot, out.rollback_seconds, rate, static_cast<double>(c.file_bytes) / 1e6,
        out.restore_seconds, bytes_rate / 1e6, c.restore_bytes_per_second > 0 ? "" : " (assumed)");
    return out;
}

void rollback_memory::observe(const std::string& key, std::uint64_t prefix_tokens,
                              std::uint64_t prompt_tokens, std::uint64_t processed) {
    if (prefix_tokens == 0 || prompt_tokens <= prefix_tokens) return;
    // After P, the request computes its own part in any case: the rest is the rollback's.
    const std::uint64_t after = prompt_tokens - prefix_tokens;
    const double overshoot =
        static_cast<double>(std::min(prefix_tokens, processed > after ? processed - after : 0));
    if (by_key_.size() >= max_prefixes && !by_key_.count(key)) {
        // Bounded: half of the prefixes go (keys are hashes: an arbitrary half).
        by_key_.erase(by_key_.begin(),
                      std::next(by_key_.begin(), static_cast<std::ptrdiff_t>(by_key_.size() / 2)));
    }
    by_key_[key] = overshoot;
    fraction_ = blend(fraction_, overshoot / static_cast<double>(prefix_tokens));
}

std::optional<double> rollback_prior(bool checkpoints_only, std::optional<long> ctx_checkpoints) {
    if (checkpoints_only && ctx_checkpoints && *ctx_checkpoints == 0) return 1.0;
    return std::nullopt;
}

double rollback_memory::expected_overshoot(const std::string& key, std::uint64_t prefix_tokens,
                                           std::optional<double> prior) const {
    if (const auto it = by_key_.find(key); it != by_key_.end()) return it->second;
    const auto fraction = fraction_ ? fraction_ : prior;
    return fraction ? *fraction * static_cast<double>(prefix_tokens) : 0.0;
}

void restore_rate::observe(std::uint64_t bytes, double ms) {
    if (bytes == 0 || ms <= 0) return;
    rate_ = blend(rate_, static_cast<double>(bytes) / (ms / 1000.0));
}

double restore_rate::estimate(std::uint64_t bytes, double save_ms) const {
    if (rate_) return *rate_;
    if (bytes > 0 && save_ms > 0) return static_cast<double>(bytes) / (save_ms / 1000.0);
    return 0;
}

}  // namespace warmslot::cache
