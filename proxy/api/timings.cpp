#include "api/timings.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <utility>

namespace warmslot::api {
namespace {

using nlohmann::json;

// The keys find_prompt_stats reads; every other key is `other`.
enum class known_key { other, timings, usage, cache_n, prompt_n, predicted_n, prompt_ms, prompt_tokens,
                 completion_tokens, prompt_tokens_details, cached_tokens };

known_key classify(const std::string& k) {
    static constexpr std::pair<std::string_view, known_key> known[] = {
        {"timings", known_key::timings},
        {"usage", known_key::usage},
        {"cache_n", known_key::cache_n},
        {"prompt_n", known_key::prompt_n},
        {"predicted_n", known_key::predicted_n},
        {"prompt_ms", known_key::prompt_ms},
        {"prompt_tokens", known_key::prompt_tokens},
        {"completion_tokens", known_key::completion_tokens},
        {"prompt_tokens_details", known_key::prompt_tokens_details},
        {"cached_tokens", known_key::cached_tokens},
    };
    for (const auto& [name, k_id] : known) {
        if (name == k) return k_id;
    }
    return known_key::other;
}

// A field's value as json::value(name, default) would read it. A value of another type reads
// as the default instead of throwing.
struct number {
    bool set = false;
    long as_long = 0;
    double as_double = 0;
    void assign(long l, double d) { set = true, as_long = l, as_double = d; }
    long get_long() const { return set ? as_long : 0L; }
    double get_double() const { return set ? as_double : 0.0; }
};

struct timings_fields {
    bool object = false;
    bool has_prompt_n = false;
    number cache_n, prompt_n, predicted_n, prompt_ms;
};

struct usage_fields {
    bool object = false;
    bool has_prompt_tokens = false;
    bool details_object = false;
    number prompt_tokens, completion_tokens, cached_tokens;
};

// Reads the few fields find_prompt_stats needs while nlohmann's parser validates the whole
// text, without building a document. Duplicate keys: the last one wins, as in a parsed json.
class stats_reader : public nlohmann::json_sax<json> {
public:
    timings_fields timings;
    usage_fields usage;
    bool root_object = false;

    bool null() override { return assign(number{}); }
    bool boolean(bool v) override { return assign_number(v ? 1 : 0, v ? 1.0 : 0.0); }
    bool number_integer(number_integer_t v) override {
        return assign_number(static_cast<long>(v), static_cast<double>(v));
    }
    bool number_unsigned(number_unsigned_t v) override {
        return assign_number(static_cast<long>(v), static_cast<double>(v));
    }
    bool number_float(number_float_t v, const string_t&) override {
        return assign_number(static_cast<long>(v), v);
    }
    bool string(string_t&) override { return assign(number{}); }
    bool binary(binary_t&) override { return assign(number{}); }
    bool start_object(std::size_t) override {
        assign(number{});
        if (depth_ == 0) root_object = true;
        if (depth_ == 1 && keys_[1] == known_key::timings) timings.object = true, section_ = known_key::timings;
        if (depth_ == 1 && keys_[1] == known_key::usage) usage.object = true, section_ = known_key::usage;
        if (depth_ == 2 && section_ == known_key::usage && keys_[2] == known_key::prompt_tokens_details) {
            usage.details_object = true;
            in_details_ = true;
        }
        ++depth_;
        return true;
    }
    bool key(string_t& k) override {
        if (depth_ < keys_.size()) keys_[depth_] = classify(k);
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override {
        assign(number{});
        ++depth_;
        return true;
    }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
        return false;
    }

private:
    bool close() {
        --depth_;
        if (depth_ == 1) section_ = known_key::other;
        if (depth_ == 2) in_details_ = false;
        return true;
    }
    bool assign_number(long l, double d) {
        number n;
        n.assign(l, d);
        return assign(n);
    }
    // A value (of any type) arrives for the current key at the current depth: it replaces
    // whatever an earlier duplicate of that key said.
    bool assign(const number& fresh) {
        if (depth_ == 1 && keys_[1] == known_key::timings) timings = {};
        if (depth_ == 1 && keys_[1] == known_key::usage) usage = {};
        if (depth_ == 2 && section_ == known_key::timings) assign_timings(keys_[2], fresh);
        if (depth_ == 2 && section_ == known_key::usage) assign_usage(keys_[2], fresh);
        if (depth_ == 3 && in_details_ && keys_[3] == known_key::cached_tokens) usage.cached_tokens = fresh;
        return true;
    }
    void assign_timings(known_key k, const number& n) {
        if (k == known_key::cache_n) timings.cache_n = n;
        if (k == known_key::prompt_n) timings.prompt_n = n, timings.has_prompt_n = true;
        if (k == known_key::predicted_n) timings.predicted_n = n;
        if (k == known_key::prompt_ms) timings.prompt_ms = n;
    }
    void assign_usage(known_key k, const number& n) {
        if (k == known_key::prompt_tokens) usage.prompt_tokens = n, usage.has_prompt_tokens = true;
        if (k == known_key::completion_tokens) usage.completion_tokens = n;
        if (k == known_key::prompt_tokens_details) usage.details_object = false, usage.cached_tokens = {};
    }

    std::size_t depth_ = 0;
    std::array<known_key, 4> keys_{};  // the last key seen at depths 1..3
    known_key section_ = known_key::other;   // timings or usage while inside that top-level object
    bool in_details_ = false;    // inside usage.prompt_tokens_details
};

}  // namespace

bool may_carry_stats(std::string_view json) noexcept {
    return json.find("\"timings\"") != std::string_view::npos ||
           json.find("\"usage\"") != std::string_view::npos;
}

std::optional<prompt_stats> find_prompt_stats(std::string_view text) {
    stats_reader r;
    if (!json::sax_parse(text, &r) || !r.root_object) return std::nullopt;
    if (r.timings.object && r.timings.has_prompt_n) {
        prompt_stats s;
        s.cached = r.timings.cache_n.get_long();
        s.processed = r.timings.prompt_n.get_long();
        s.predicted = r.timings.predicted_n.get_long();
        s.prompt_ms = r.timings.prompt_ms.get_double();
        return s;
    }
    if (r.usage.object && r.usage.has_prompt_tokens) {
        prompt_stats s;
        if (r.usage.details_object) s.cached = r.usage.cached_tokens.get_long();
        s.processed = r.usage.prompt_tokens.get_long() - s.cached;
        s.predicted = r.usage.completion_tokens.get_long();
        return s;
    }
    return std::nullopt;
}

}  // namespace warmslot::api
