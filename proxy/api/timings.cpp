#include "api/timings.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "api/json_text.hpp"

namespace warmslot::api {
namespace {

using nlohmann::json;

// The keys find_prompt_stats reads; every other key is `other`.
enum class known_key {
    other,
    timings,
    usage,
    cache_n,
    prompt_n,
    predicted_n,
    prompt_ms,
    prompt_tokens,
    completion_tokens,
    prompt_tokens_details,
    cached_tokens
};

known_key classify(std::string_view k) {
    // By length first: most keys of an answer are none of these and cost one comparison.
    switch (k.size()) {
        case 5: return k == "usage" ? known_key::usage : known_key::other;
        case 7:
            if (k == "timings") return known_key::timings;
            return k == "cache_n" ? known_key::cache_n : known_key::other;
        case 8: return k == "prompt_n" ? known_key::prompt_n : known_key::other;
        case 9: return k == "prompt_ms" ? known_key::prompt_ms : known_key::other;
        case 11: return k == "predicted_n" ? known_key::predicted_n : known_key::other;
        case 13:
            if (k == "prompt_tokens") return known_key::prompt_tokens;
            return k == "cached_tokens" ? known_key::cached_tokens : known_key::other;
        case 17: return k == "completion_tokens" ? known_key::completion_tokens : known_key::other;
        case 21:
            return k == "prompt_tokens_details" ? known_key::prompt_tokens_details
                                                : known_key::other;
        default: return known_key::other;
    }
}

bool in_range(double count) { return count > -1e18 && count < 1e18; }

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
class stats_reader final : public nlohmann::json_sax<json> {
  public:
    timings_fields timings;
    usage_fields usage;
    bool root_object = false;

    bool null() override { return assign(number{}); }
    bool boolean(bool v) override { return assign_number(v ? 1 : 0, v ? 1.0 : 0.0); }
    // A count beyond ±1e18 (the fast scan's bound) is nonsense: it reads as the default, which
    // keeps the conversion to long and the differences taken later defined.
    bool number_integer(number_integer_t v) override { return assign_count(v); }
    bool number_unsigned(number_unsigned_t v) override { return assign_count(v); }
    bool number_float(number_float_t v, const string_t&) override { return assign_count(v); }
    bool string(string_t&) override { return assign(number{}); }
    bool binary(binary_t&) override { return assign(number{}); }
    bool start_object(std::size_t) override {
        assign(number{});
        if (depth_ == 0) root_object = true;
        if (depth_ == 1 && keys_[1] == known_key::timings)
            timings.object = true, section_ = known_key::timings;
        if (depth_ == 1 && keys_[1] == known_key::usage)
            usage.object = true, section_ = known_key::usage;
        if (depth_ == 2 && section_ == known_key::usage &&
            keys_[2] == known_key::prompt_tokens_details) {
            usage.details_object = true;
            in_details_ = true;
        }
        ++depth_;
        return true;
    }
    bool key(string_t& k) override { return key_text(k); }
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

    // The same events for fast_scan, which has no string_t to hand over.
    bool key_text(std::string_view k) {
        if (depth_ < keys_.size()) keys_[depth_] = classify(k);
        return true;
    }
    bool other_value() { return assign(number{}); }
    template <typename T>
    bool assign_count(T v) {
        const auto d = static_cast<double>(v);
        return in_range(d) ? assign_number(static_cast<long>(v), d) : assign(number{});
    }
    bool assign_number(long l, double d) {
        number n;
        n.assign(l, d);
        return assign(n);
    }

  private:
    bool close() {
        --depth_;
        if (depth_ == 1) section_ = known_key::other;
        if (depth_ == 2) in_details_ = false;
        return true;
    }
    // A value (of any type) arrives for the current key at the current depth: it replaces
    // whatever an earlier duplicate of that key said.
    bool assign(const number& fresh) {
        if (depth_ == 1 && keys_[1] == known_key::timings) timings = {};
        if (depth_ == 1 && keys_[1] == known_key::usage) usage = {};
        if (depth_ == 2 && section_ == known_key::timings) assign_timings(keys_[2], fresh);
        if (depth_ == 2 && section_ == known_key::usage) assign_usage(keys_[2], fresh);
        if (depth_ == 3 && in_details_ && keys_[3] == known_key::cached_tokens)
            usage.cached_tokens = fresh;
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
        if (k == known_key::prompt_tokens_details)
            usage.details_object = false, usage.cached_tokens = {};
    }

    std::size_t depth_ = 0;
    std::array<known_key, 4> keys_{};       // the last key seen at depths 1..3
    known_key section_ = known_key::other;  // timings or usage while inside that top-level object
    bool in_details_ = false;               // inside usage.prompt_tokens_details
};

// The fast path: a strict JSON scanner that feeds a stats_reader without nlohmann's lexer,
// which costs about 90 instructions a byte. It accepts only text it is sure is valid JSON
// and handles a subset of it (no \u escapes, integers up to 18 digits, nesting up to 64);
// on anything else it answers `unsure` and the caller asks nlohmann's parser.
class fast_scan {
  public:
    fast_scan(std::string_view text, stats_reader& r)
        : p_(text.data()), end_(text.data() + text.size()), r_(r) {}

    // True: the text is valid JSON and `r` has seen all of it. False: unsure.
    bool run() {
        if (!value(0)) return false;
        skip_ws();
        return p_ == end_;
    }

  private:
    static constexpr int max_depth = 64;

    void skip_ws() {
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }
    bool eat(char c) {
        skip_ws();
        if (p_ == end_ || *p_ != c) return false;
        ++p_;
        return true;
    }
    // Report: hand every value to the reader. Without it the same grammar is only checked:
    // for the values of top-level keys other than `timings` and `usage`, where the reader
    // would do nothing with them (most of an answer's bytes).
    template <bool Report = true>
    bool value(int depth) {
        skip_ws();
        if (p_ == end_ || depth > max_depth) return false;
        switch (*p_) {
            case '{': return object<Report>(depth);
            case '[': return array<Report>(depth);
            case '"': {
                std::string_view ignored;
                bool escaped = false;
                return string(ignored, escaped) && (!Report || r_.other_value());
            }
            case 't': return literal("true") && (!Report || r_.assign_number(1, 1.0));
            case 'f': return literal("false") && (!Report || r_.assign_number(0, 0.0));
            case 'n': return literal("null") && (!Report || r_.other_value());
            default: return number<Report>();
        }
    }
    template <bool Report>
    bool object(int depth) {
        ++p_;
        if (Report) r_.start_object(0);
        if (eat('}')) return !Report || r_.end_object();
        do {
            std::string_view k;
            skip_ws();
            bool escaped = false;
            if (p_ == end_ || *p_ != '"' || !string(k, escaped) || escaped) return false;
            if (!eat(':')) return false;
            if (Report) {
                r_.key_text(k);
                const bool ignored = depth == 0 && classify(k) == known_key::other;
                if (!(ignored ? value<false>(depth + 1) : value<true>(depth + 1))) return false;
            } else if (!value<false>(depth + 1)) {
                return false;
            }
        } while (eat(','));
        return eat('}') && (!Report || r_.end_object());
    }
    template <bool Report>
    bool array(int depth) {
        ++p_;
        if (Report) r_.start_array(0);
        if (eat(']')) return !Report || r_.end_array();
        do {
            if (!value<Report>(depth + 1)) return false;
        } while (eat(','));
        return eat(']') && (!Report || r_.end_array());
    }
    bool literal(std::string_view word) {
        if (static_cast<std::size_t>(end_ - p_) < word.size() ||
            std::string_view(p_, word.size()) != word) {
            return false;
        }
        p_ += word.size();
        return true;
    }
    bool string(std::string_view& text, bool& escaped);
    template <bool Report>
    bool number();

    const char* p_;
    const char* end_;
    stats_reader& r_;
};

// A string at p_ (on its opening quote); `text` is its raw content, escapes not decoded, and
// `escaped` tells whether it has any.
bool fast_scan::string(std::string_view& text, bool& escaped) {
    const char* start = ++p_;
    while (p_ != end_) {
        p_ = json_text::skip_plain(p_, end_);
        if (p_ == end_) break;
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"') {
            text = std::string_view(start, static_cast<std::size_t>(p_ - start));
            ++p_;
            return true;
        }
        if (c < 0x20) return false;
        if (c == '\\') {
            escaped = true;
            if (++p_ == end_ ||
                std::string_view("\"\\/bfnrt").find(*p_) == std::string_view::npos) {
                return false;  // \u escapes and errors: unsure
            }
            ++p_;
        } else if (c < 0x80) {
            ++p_;
        } else {
            const auto n = json_text::utf8_length(reinterpret_cast<const unsigned char*>(p_),
                                                  reinterpret_cast<const unsigned char*>(end_));
            if (n == 0) return false;
            p_ += n;
        }
    }
    return false;
}

// A number in JSON's grammar. Integers of up to 18 digits and decimals whose value fits a
// long are read; anything else is unsure (also when not reported: the same texts pass).
template <bool Report>
bool fast_scan::number() {
    const char* start = p_;
    const auto digits = [&] {
        const char* from = p_;
        while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
        return static_cast<std::size_t>(p_ - from);
    };
    if (p_ != end_ && *p_ == '-') ++p_;
    const char* int_start = p_;
    const std::size_t int_digits = digits();
    if (int_digits == 0 || (int_digits > 1 && *int_start == '0')) return false;
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
        ++p_;
        if (digits() == 0) return false;
        integer = false;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
        ++p_;
        if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
        if (digits() == 0) return false;
        integer = false;
    }
    if (integer) {
        if (int_digits > 18) return false;
        if (!Report) return true;
        long v = 0;  // at most 18 digits: no overflow
        for (const char* d = int_start; d != p_; ++d) v = v * 10 + (*d - '0');
        if (*start == '-') v = -v;
        return r_.assign_number(v, static_cast<double>(v));
    }
    double d = 0;
    const auto [end, ec] = std::from_chars(start, p_, d);
    if (ec != std::errc{} || end != p_ || !(d > -1e18 && d < 1e18)) return false;
    return !Report || r_.assign_number(static_cast<long>(d), d);
}

// One memchr pass for both keys, anchored on the 'g' they share: a rare letter in JSON text, so
// the pass stops a few times per event, where an anchor on '"' or 't' stops at most words.
bool has_stats_key(std::string_view text) noexcept {
    constexpr std::string_view timings = "\"timings\"", usage = "\"usage\"";
    constexpr std::size_t in_timings = 6, in_usage = 4;  // where the 'g' is in each
    const char* const begin = text.data();
    const char* const end = begin + text.size();
    const auto at = [&](const char* g, std::string_view word, std::size_t offset) {
        return static_cast<std::size_t>(g - begin) >= offset &&
               static_cast<std::size_t>(end - g) >= word.size() - offset &&
               std::memcmp(g - offset, word.data(), word.size()) == 0;
    };
    for (const char* p = begin; p != end; ++p) {
        p = static_cast<const char*>(std::memchr(p, 'g', static_cast<std::size_t>(end - p)));
        if (p == nullptr) return false;
        if (at(p, timings, in_timings) || at(p, usage, in_usage)) return true;
    }
    return false;
}

long as_long(const json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number()) return 0L;
    return in_range(it->get<double>()) ? it->get<long>() : 0L;
}

// Usage in the Anthropic Messages shape (input_tokens are the computed ones, next to
// cache_read_input_tokens) or the OpenAI Responses shape (input_tokens are all of them, with
// input_tokens_details.cached_tokens), at the top or inside the "message" of an Anthropic
// message_start event or the "response" of a Responses event.
std::optional<prompt_stats> input_token_usage(std::string_view text) {
    if (text.find("\"input_tokens\"") == std::string_view::npos) return std::nullopt;
    const json doc = json::parse(text, nullptr, false);
    if (!doc.is_object()) return std::nullopt;
    for (const json* holder : {&doc, doc.contains("message") ? &doc["message"] : nullptr,
                               doc.contains("response") ? &doc["response"] : nullptr}) {
        if (holder == nullptr || !holder->is_object()) continue;
        const auto usage = holder->find("usage");
        if (usage == holder->end() || !usage->is_object() || !usage->contains("input_tokens")) {
            continue;
        }
        prompt_stats s;
        s.predicted = as_long(*usage, "output_tokens");
        if (usage->contains("cache_read_input_tokens")) {
            s.cached = as_long(*usage, "cache_read_input_tokens");
            s.processed = as_long(*usage, "input_tokens");
            return s;
        }
        const auto details = usage->find("input_tokens_details");
        if (details != usage->end() && details->is_object()) {
            s.cached = as_long(*details, "cached_tokens");
            s.processed = as_long(*usage, "input_tokens") - s.cached;
            return s;
        }
    }
    return std::nullopt;
}

}  // namespace

bool may_carry_stats(std::string_view json) noexcept { return has_stats_key(json); }

std::optional<prompt_stats> find_prompt_stats(std::string_view text) {
    stats_reader r;
    if (!fast_scan(text, r).run()) {
        r = stats_reader{};
        if (!json::sax_parse(text, &r)) return std::nullopt;
    }
    if (!r.root_object) return std::nullopt;
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
    return input_token_usage(text);
}

}  // namespace warmslot::api
