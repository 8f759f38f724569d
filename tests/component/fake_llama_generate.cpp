// The fake llama-server's generation endpoints and its scripting: which slot a task runs on,
// what it reuses there (timings), what the slot holds afterwards, and the answer's shape
// (/completion or /v1/chat/completions, streamed or not).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "fake_llama_model.hpp"

namespace warmslot::testing {
namespace {

using nlohmann::json;

fake_reply error_json(unsigned status, const std::string& message, const std::string& type) {
    fake_reply r;
    r.status = status;
    r.body = json{{"error", {{"code", status}, {"message", message}, {"type", type}}}}.dump();
    return r;
}

std::string event(const json& j) { return "data: " + j.dump() + "\n\n"; }

// The prompt's tokens as llama-server makes them for this endpoint.
std::optional<std::vector<int>> prompt_of(const std::string& key, const json& body,
                                          const std::string& raw) {
    if (key == "/v1/chat/completions") {
        const auto text = fake_render(raw);
        if (!text) return std::nullopt;
        return fake_tokenize(*text, true, true);
    }
    const auto p = body.value("prompt", json());
    if (p.is_string()) return fake_tokenize(p.get<std::string>(), true, true);
    if (!p.is_array()) return std::nullopt;
    std::vector<int> out;  // token ids as given (no BOS added), texts tokenized in place
    for (const auto& e : p) {
        if (e.is_number_integer()) {
            out.push_back(e.get<int>());
        } else if (e.is_string()) {
            const auto t = fake_tokenize(e.get<std::string>(), false, true);
            out.insert(out.end(), t.begin(), t.end());
        }
    }
    return out;
}

int predict_limit(const json& body) {
    for (const char* k : {"n_predict", "max_tokens", "max_completion_tokens"}) {
        if (body.contains(k) && body[k].is_number_integer()) return body[k].get<int>();
    }
    return -1;
}

}  // namespace

std::optional<fake_reply> fake_model::generate(const fake_call& c) {
    const auto body = json::parse(c.body, nullptr, false);
    if (!body.is_object()) return error_json(500, "invalid JSON", "server_error");
    const auto prompt = prompt_of(c.key, body, c.body);
    if (!prompt || prompt->empty())
        return error_json(400, "invalid prompt", "invalid_request_error");
    if (prompt->size() >= opt_.n_ctx)
        return error_json(400, "the request exceeds the available context size",
                          "exceed_context_size_error");
    const int pinned = body.value("id_slot", -1);
    int slot = -1;
    if (pinned >= 0 && pinned < opt_.slots) {
        if (slots_[static_cast<std::size_t>(pinned)].processing) return std::nullopt;  // waits
        slot = pinned;
    } else {
        slot = pick_slot(*prompt);
        if (slot < 0) return std::nullopt;  // every slot busy: queued
    }
    auto& s = slots_[static_cast<std::size_t>(slot)];
    const std::uint64_t cache_n = body.value("cache_prompt", true) ? reused(s, *prompt) : 0;
    const std::uint64_t prompt_n = prompt->size() - cache_n;
    const int limit = predict_limit(body);
    const auto reply_tokens = fake_tokenize(opt_.reply, false, false);
    const std::size_t n_gen = std::clamp<std::size_t>(
        limit < 0 ? reply_tokens.size() : static_cast<std::size_t>(std::max(limit, 1)), 1,
        reply_tokens.size());
    // The KV holds the prompt and every generated token but the last (never decoded).
    s.tokens = *prompt;
    s.tokens.insert(s.tokens.end(), reply_tokens.begin(),
                    reply_tokens.begin() + static_cast<std::ptrdiff_t>(n_gen - 1));
    s.task = next_task_++;
    s.last_used = ++clock_;
    s.processing = true;
    prompt_tokens_total_ += prompt_n;

    const std::string text = opt_.reply.substr(0, n_gen);
    const double prompt_ms = static_cast<double>(prompt_n) * opt_.prompt_ms_per_token;
    const json timings = {
        {"cache_n", cache_n},
        {"prompt_n", prompt_n},
        {"prompt_ms", prompt_ms},
        {"prompt_per_second",
         prompt_ms > 0 ? 1000.0 * static_cast<double>(prompt_n) / prompt_ms : 0.0},
        {"predicted_n", n_gen},
        {"predicted_ms", 1.0},
        {"predicted_per_second", 1000.0 * static_cast<double>(n_gen)}};
    const std::string finish = n_gen < reply_tokens.size() ? "length" : "stop";
    const json usage = {{"prompt_tokens", prompt->size()},
                        {"completion_tokens", n_gen},
                        {"total_tokens", prompt->size() + n_gen},
                        {"prompt_tokens_details", {{"cached_tokens", cache_n}}}};
    fake_reply r;
    r.busy_slot = slot;
    r.epoch = epoch_;
    r.sse = body.value("stream", false);
    if (c.key == "/v1/chat/completions") {
        if (!r.sse) {
            r.body = json{{"id", "chatcmpl-fake"},
                          {"object", "chat.completion"},
                          {"model", opt_.alias},
                          {"choices",
                           {{{"index", 0},
                             {"finish_reason", finish},
                             {"message", {{"role", "assistant"}, {"content", text}}}}}},
                          {"usage", usage},
                          {"timings", timings}}
                         .dump();
            return r;
        }
        const json base = {
            {"id", "chatcmpl-fake"}, {"object", "chat.completion.chunk"}, {"model", opt_.alias}};
        auto first = base;
        first["choices"] = {
            {{"index", 0}, {"delta", {{"role", "assistant"}, {"content", nullptr}}}}};
        r.events.push_back(event(first));
        for (const char ch : text) {
            auto e = base;
            e["choices"] = {{{"index", 0}, {"delta", {{"content", std::string(1, ch)}}}}};
            r.events.push_back(event(e));
        }
        auto last = base;
        last["choices"] = {{{"index", 0}, {"delta", json::object()}, {"finish_reason", finish}}};
        last["usage"] = usage;
        last["timings"] = timings;
        r.events.push_back(event(last));
        r.events.push_back("data: [DONE]\n\n");
        return r;
    }
    const json done = {{"index", 0},
                       {"content", r.sse ? std::string() : text},
                       {"id_slot", slot},
                       {"stop", true},
                       {"model", opt_.alias},
                       {"tokens_predicted", n_gen},
                       {"tokens_evaluated", prompt->size()},
                       {"tokens_cached", s.tokens.size()},
                       {"stop_type", finish == "stop" ? "eos" : "limit"},
                       {"timings", timings}};
    if (!r.sse) {
        r.body = done.dump();
        return r;
    }
    for (const char ch : text) {
        r.events.push_back(event(
            {{"index", 0}, {"content", std::string(1, ch)}, {"stop", false}, {"id_slot", slot}}));
    }
    r.events.push_back(event(done));  // /completion sends no [DONE]
    return r;
}

void fake_model::finish(int slot, std::uint64_t epoch) {
    std::lock_guard lock(mu_);
    if (epoch != epoch_ || slot < 0 || slot >= opt_.slots) return;
    slots_[static_cast<std::size_t>(slot)].processing = false;
    changed();
}

void fake_model::restart(std::optional<std::string> build_info, std::optional<int> slots) {
    std::lock_guard lock(mu_);
    ++epoch_;
    if (slots) opt_.slots = *slots;
    slots_.assign(static_cast<std::size_t>(opt_.slots), slot_state{});
    next_task_ = 0;
    clock_ = 0;
    prompt_tokens_total_ = 0;
    if (build_info) opt_.build_info = std::move(*build_info);
    changed();
}

std::vector<fake_call> fake_model::calls() const {
    std::lock_guard lock(mu_);
    return calls_;
}

bool fake_model::wait_for(const std::function<bool(const std::vector<fake_call>&)>& pred,
                          std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(calls_); });
}

std::vector<int> fake_model::slot_tokens(int slot) const {
    std::lock_guard lock(mu_);
    return slots_.at(static_cast<std::size_t>(slot)).tokens;
}

bool fake_model::slot_busy(int slot) const {
    std::lock_guard lock(mu_);
    return slots_.at(static_cast<std::size_t>(slot)).processing;
}

void fake_model::delay(std::string key, std::chrono::milliseconds d, int times) {
    std::lock_guard lock(mu_);
    delays_[std::move(key)] = pause{d, times};
}

void fake_model::fail(std::string key, unsigned status, std::string message, int times) {
    std::lock_guard lock(mu_);
    faults_[std::move(key)].push_back(fault{status, std::move(message), times});
}

void fake_model::script_slots(std::vector<std::string> bodies) {
    std::lock_guard lock(mu_);
    for (auto& b : bodies) scripted_slots_.push_back(std::move(b));
}

void fake_model::put_tokens(int slot, std::vector<int> tokens) {
    std::lock_guard lock(mu_);
    auto& s = slots_.at(static_cast<std::size_t>(slot));
    s.tokens = std::move(tokens);
    s.task = next_task_++;
    s.last_used = ++clock_;
    changed();
}

}  // namespace warmslot::testing
