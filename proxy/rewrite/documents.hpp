// Finding documents in a chat request and rewriting them in place (order and edits). Internal
// to the rewrite module; pure apart from the memory it reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rewrite/memory.hpp"
#include "rewrite/rules.hpp"

namespace warmslot::rewrite::detail {

struct document_outcome {
    std::size_t reordered_groups = 0;
    std::size_t edits = 0;
    std::vector<std::string> notes;  // revision notes for the final user turn
};

// Rewrites the documents of `messages` (a JSON array of message objects) in place and records
// what was sent in `update`. `edits_allowed` false: revisions are sent as they are (there is no
// final user turn for their notes).
document_outcome rewrite_documents(nlohmann::json& messages, const compiled_rules& rules,
                                   const memory& mem, memory_update& update, bool edits_allowed);

// Positions [begin, end) of the delimited documents in `text`, in order; each runs from the
// start of a begin match to the end of the next end match.
std::vector<std::pair<std::size_t, std::size_t>> delimited_spans(
    const std::string& text, const std::vector<compiled_delimiter>& delimiters);

// The order to send documents in: those in `cached` first in cached order, then the others in
// their request order. Returns a permutation of 0..hashes.size()-1.
std::vector<std::size_t> cached_first(const std::vector<std::uint64_t>& hashes,
                                      const std::vector<std::uint64_t>& cached);

}  // namespace warmslot::rewrite::detail
