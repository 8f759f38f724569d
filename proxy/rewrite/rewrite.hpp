// Append-only rewriting of chat requests: the rules that keep what a server already processed a
// prefix of the next prompt (see docs/rewriting.md). Pure apart from the memory it reads.
//
//   volatile lines  lines of the system prompt that change on every request (dates, ids) move
//                   into the final user turn, inside a marked <context> block;
//   document order  documents seen before after the same prefix come first, in the order they
//                   were sent then; new ones follow;
//   edits (append)  a document that revises one sent before is sent as that original, and a
//                   <revision> note with the changed lines goes into the final user turn;
//   turn notes      a user turn that got such a block keeps it when it becomes history;
//   system to front system messages a client puts after the first user turn (an agent's tool
//                   or agent lists) join the leading ones; in a Responses body the leading
//                   system and developer items then become one.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rewrite/memory.hpp"
#include "rewrite/rules.hpp"

namespace warmslot::rewrite {

struct result {
    nlohmann::json body;               // what to send (a copy of the input when nothing applied)
    std::vector<std::string> applied;  // "volatile_lines=2", "document_order=1", ...
    memory_update update;              // to remember once the request succeeded
    bool changed() const { return !applied.empty(); }
};

// Applies `rules` to a chat body ({"messages": [...]}); any other body comes back unchanged.
result rewrite_chat(const compiled_rules& rules, const memory& mem, const nlohmann::json& body);

// Anthropic Messages bodies under the same rules (rewrite/shapes.cpp): the top-level "system"
// (a string or text blocks) becomes a leading system message, and back: the leading system
// messages become "system" (a string when they are one string, else text blocks in order, each
// message after the first starting with a blank line, since llama-server joins the blocks).
nlohmann::json messages_to_chat(const nlohmann::json& body);
nlohmann::json chat_to_messages(nlohmann::json chat);
// OpenAI Responses bodies too: "instructions" becomes a leading system message and "input" (a
// string, or items) messages; back, the leading system messages after the instructions join
// them (separated by a blank line). `original` is the body as the client sent it.
// The chat form carries `responses_marker` (removed on the way back) so the rules know the shape.
nlohmann::json responses_to_chat(const nlohmann::json& body);
inline constexpr const char* responses_marker = "x-warmslot-responses";
nlohmann::json chat_to_responses(nlohmann::json chat, const nlohmann::json& original);

// The X-Warmslot-Rewrites value: the applied rules joined with ", ", or "none".
std::string describe(const std::vector<std::string>& applied);

// The rules of every model and one memory per tenant: what the request path holds. A tenant's
// requests are rewritten only from what that tenant's own earlier requests sent, so one
// client's documents never reach another's request. Each memory has the configured size; the
// tenants are those of the configured keys ("" for keys without one), so they are bounded.
// Thread-safe: the rules are immutable, the memories lock, the map of them is locked.
class rewriter {
  public:
    explicit rewriter(const config::rewrite_settings& s)
        : rules_(std::make_shared<const rule_book>(s)), memory_bytes_(s.memory) {
        active_ = rules_->any();
    }
    // A config reload: new rules from now on (the memories and their size stay). Thread-safe.
    void set_rules(const config::rewrite_settings& s) {
        auto next = std::make_shared<const rule_book>(s);
        std::lock_guard lock(mu_);
        active_ = next->any();
        rules_ = std::move(next);
    }
    // std::nullopt when no rule is on for `model` (the request's "model", as the request path
    // classified it) or `body` is not a chat body. Reads `tenant`'s memory.
    std::optional<result> apply(std::string_view tenant, const nlohmann::json& body,
                                std::string_view model) const;
    std::optional<result> apply(const nlohmann::json& body, std::string_view model) const {
        return apply("", body, model);
    }
    // After the rewritten request succeeded: the server now holds what was sent.
    void remember(std::string_view tenant, const result& r) {
        memory_of(tenant).remember(r.update);
    }
    void remember(const result& r) { remember("", r); }
    const memory& remembered(std::string_view tenant = "") const { return memory_of(tenant); }

  private:
    std::shared_ptr<const rule_book> rules() const {
        std::lock_guard lock(mu_);
        return rules_;
    }
    memory& memory_of(std::string_view tenant) const;
    mutable std::mutex mu_;
    std::shared_ptr<const rule_book> rules_;
    std::atomic<bool> active_ = false;  // rules_->any(), read without the lock
    std::uint64_t memory_bytes_;
    mutable std::map<std::string, std::unique_ptr<memory>, std::less<>> memories_;  // by tenant
};

}  // namespace warmslot::rewrite
