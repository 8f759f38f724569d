#include "sse/parser.hpp"

#include <cstring>
#include <utility>

namespace warmslot::sse {

namespace {

constexpr std::string_view byte_order_mark = "\xEF\xBB\xBF";

// The first "\r" or "\n" from `pos`, or npos. Two memchr passes instead of find_first_of,
// which tests every byte against both characters one at a time.
std::size_t line_end(std::string_view bytes, std::size_t pos) noexcept {
    const char* begin = bytes.data() + pos;
    const std::size_t n = bytes.size() - pos;
    const void* lf = std::memchr(begin, '\n', n);
    const std::size_t until_lf =
        lf ? static_cast<std::size_t>(static_cast<const char*>(lf) - begin) : n;
    const void* cr = std::memchr(begin, '\r', until_lf);
    if (cr) return pos + static_cast<std::size_t>(static_cast<const char*>(cr) - begin);
    return lf ? pos + until_lf : std::string_view::npos;
}

// Releases the memory of a buffer, not only its contents.
void release(std::string& s) noexcept { std::string().swap(s); }

}  // namespace

parser::parser(std::size_t max_event_bytes) noexcept : max_event_bytes_{max_event_bytes} {}

void parser::feed(std::string_view bytes, std::vector<event>& out) {
    struct collect final : event_sink {
        std::vector<event>& events;
        explicit collect(std::vector<event>& e) : events(e) {}
        void on_event(std::string_view name, std::string_view data, std::string_view id) override {
            events.push_back(event{std::string(name), std::string(data), std::string(id)});
        }
    } sink(out);
    feed(bytes, sink);
}

void parser::feed(std::string_view bytes, event_sink& out) {
    std::size_t pos = 0;
    while (pos < bytes.size() && !failed_) {
        if (skip_lf_) {
            // Checked byte by byte so that a "\r\n" split across two chunks is one line ending.
            skip_lf_ = false;
            if (bytes[pos] == '\n') {
                ++pos;
                continue;
            }
        }
        const std::size_t eol = line_end(bytes, pos);
        if (eol == std::string_view::npos) {
            append_partial(bytes.substr(pos));
            return;
        }
        end_line(bytes.substr(pos, eol - pos), out);
        skip_lf_ = bytes[eol] == '\r';
        pos = eol + 1;
    }
}

void parser::finish(std::vector<event>& /*out*/) {
    // WHATWG: "Once the end of the file is reached, any pending data must be discarded."
    *this = parser{max_event_bytes_};
}

bool parser::pending() const noexcept { return !line_.empty() || in_comment_ || !data_.empty(); }

void parser::append_partial(std::string_view part) {
    if (in_comment_) return;
    if (line_.empty() && part.front() == ':') {
        // A comment (e.g. a keep-alive) can be any length: skip it instead of buffering it.
        in_comment_ = true;
        return;
    }
    if (!fits(part.size())) {
        fail();
        return;
    }
    line_.append(part);
}

void parser::end_line(std::string_view tail, event_sink& out) {
    if (in_comment_ || (line_.empty() && !tail.empty() && tail.front() == ':')) {
        in_comment_ = false;
        at_stream_start_ = false;
        return;
    }
    if (!fits(tail.size())) {
        fail();
        return;
    }
    if (line_.empty()) {
        process_line(tail, out);  // the common case: the whole line is in this chunk, no copy
        return;
    }
    line_.append(tail);
    process_line(line_, out);
    line_.clear();
}

void parser::process_line(std::string_view line, event_sink& out) {
    if (at_stream_start_) {
        at_stream_start_ = false;
        if (line.starts_with(byte_order_mark)) line.remove_prefix(byte_order_mark.size());
    }
    if (line.empty()) {
        dispatch(out);
        return;
    }
    if (line.front() == ':') return;  // comment
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
        process_field(line, {});
        return;
    }
    std::string_view value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    process_field(line.substr(0, colon), value);
}

void parser::process_field(std::string_view field, std::string_view value) {
    // Each field adds at most the length of its line, which `fits` has already admitted.
    if (field == "data") {
        data_.append(value);
        data_.push_back('\n');
    } else if (field == "event") {
        name_.assign(value);
    } else if (field == "id") {
        if (value.find('\0') == std::string_view::npos) last_id_.assign(value);
    }
    // "retry" and unknown fields are ignored.
}

void parser::dispatch(event_sink& out) {
    if (data_.empty()) {
        name_.clear();
        return;
    }
    data_.pop_back();  // the "\n" after the last data line
    out.on_event(name_, data_, last_id_);
    name_.clear();
    data_.clear();  // keeps its buffer for the next event
}

bool parser::fits(std::size_t extra) const noexcept {
    const std::size_t used = line_.size() + data_.size() + name_.size();
    return used <= max_event_bytes_ && extra <= max_event_bytes_ - used;
}

void parser::fail() noexcept {
    failed_ = true;
    in_comment_ = false;
    release(line_);
    release(data_);
    release(name_);
}

}  // namespace warmslot::sse
