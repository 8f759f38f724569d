// A prompt's tokens put together from the tokens of its parts, so that the parts a request
// repeats from earlier ones (system prompt, documents, history) are not tokenized again.
//
// llama.cpp's tokenizer first cuts a text at the special tokens it contains (with
// parse_special, as the chat endpoint tokenizes) and then tokenizes each stretch of plain text
// between them on its own (llama-vocab.cpp: tokenizer_st_partition, then one session per
// fragment; SentencePiece's space prefix goes to a fragment after a special token, as to the
// first). A prompt cut right before a special token's text therefore tokenizes as its parts do,
// one after the other, each without the tokens a prompt begins with (BOS), which come once in
// front (the tokens of an empty prompt). Exceptions exist: a vocabulary that appends EOS to
// every prompt (its empty prompt has more than one token: parts are not used), special tokens
// that strip the whitespace beside them (phi-3's rstrip). So whether the parts add up to the
// whole is checked against a whole tokenization on the first prompts of each model and then
// now and then; one difference turns parts off for that model (token_parts::checked).
//
// Pure, no I/O. One token_parts per model identity; not thread-safe (the tier locks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace warmslot::cache {

// Texts in `text` that may be a special token's: `<...>` (up to 48 bytes, no whitespace or
// `<` inside, e.g. `<|im_start|>`, `<start_of_turn>`, `</s>`) and `[...]` of capitals, digits,
// `_` and `/` (`[INST]`, `[/INST]`). Distinct, in order of first appearance, at most `max`.
std::vector<std::string> marker_candidates(std::string_view text, std::size_t max);

// Where the parts of `text` begin: 0, then right before each occurrence of one of `markers`
// (texts known to be one special token each) once the part before it is at least `min_part`
// bytes long. Decided from the start of the text onwards, so two texts that begin alike are
// cut alike up to where they differ.
std::vector<std::size_t> part_starts(std::string_view text, const std::vector<std::string>& markers,
                                     std::size_t min_part);

// Whether a candidate marker is one special token: tokenized with special tokens parsed it is
// exactly one token, and as plain text it is not that token alone.
bool is_special(const std::vector<int>& parsed, const std::vector<int>& plain);

class token_parts {
  public:
    // Remembers at most `max_tokens` tokens of parts, least recently used dropped first.
    explicit token_parts(std::size_t max_tokens = 1u << 20);

    // Parts are used only while no check found a difference, once the tokens an empty prompt
    // gets are known (start()).
    bool usable() const { return !broken_; }
    // The tokens every prompt begins with: those of an empty prompt with special tokens added.
    // More than one (an EOS appended too) turns parts off.
    const std::optional<std::vector<int>>& start() const { return start_; }
    void set_start(std::vector<int> tokens);

    // The markers known to be special tokens, and the candidates in `text` not judged yet (at
    // most `max` of them; a model's judged candidates are bounded, see judge()).
    const std::vector<std::string>& markers() const { return markers_; }
    std::vector<std::string> unjudged(std::string_view text, std::size_t max) const;
    // Records whether `candidate` is a special token. At most 512 candidates are kept per
    // model; beyond that new ones are not judged (and never cut at).
    void judge(const std::string& candidate, bool special);
    bool judged_full() const { return judged_.size() >= max_judged; }

    // The tokens remembered for one part (without a prompt's start), refreshing it.
    const std::vector<int>* find(std::string_view part);
    void remember(std::string_view part, std::vector<int> tokens);

    // Whether the next prompt put together from parts should also be tokenized whole and
    // compared: the first three, then every 64th.
    bool check_due();
    // A checked prompt: its parts' tokens and its whole tokenization.
    void checked(bool same);

    std::size_t remembered_tokens() const { return tokens_; }
    std::size_t remembered_parts() const { return entries_.size(); }

    static constexpr std::size_t max_judged = 512;

  private:
    struct key {
        std::uint64_t low = 0, high = 0;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        std::size_t operator()(const key& k) const { return static_cast<std::size_t>(k.low); }
    };
    struct entry {
        std::vector<int> tokens;
        std::list<key>::iterator at;
    };
    static key key_of(std::string_view part);

    std::size_t max_tokens_;
    std::size_t tokens_ = 0;
    std::list<key> order_;  // most recently used first
    std::unordered_map<key, entry, key_hash> entries_;
    std::vector<std::string> markers_;
    std::optional<std::vector<int>> start_;
    std::set<std::string, std::less<>> judged_;
    std::uint64_t uses_ = 0;
    bool broken_ = false;
};

}  // namespace warmslot::cache
