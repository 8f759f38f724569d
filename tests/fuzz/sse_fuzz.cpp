// libFuzzer target: the SSE parser (sse/parser.hpp) is split-safe. The input is a small header
// (an event size limit and a seed) and then a stream; the stream is fed whole to one parser and
// cut into pseudo-random chunks, empty ones included, for two more (one gathering events, one
// handing them to a sink). All three must see the same events, fail alike and stop with the same
// pending state: how TCP cuts llama-server's stream never changes what the relay observes.
//
//   build-asan/tests/fuzz/sse_fuzz -dict=tests/fuzz/sse.dict -max_len=1048576
//       build-asan/fuzz/corpus/sse tests/fuzz/seeds/sse
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sse/parser.hpp"

namespace {

using warmslot::sse::event;

void check(bool ok) {
    if (!ok) std::abort();
}

class gather final : public warmslot::sse::event_sink {
  public:
    std::vector<event> events;
    void on_event(std::string_view name, std::string_view data, std::string_view id) override {
        events.push_back(event{std::string(name), std::string(data), std::string(id)});
    }
};

// The chunk lengths: mostly short (every boundary inside "\r\n" and a BOM gets tried), some 0,
// some long.
std::size_t next_length(std::uint32_t& state) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    switch (state % 8) {
        case 0: return 0;
        case 1: return (state >> 3) % 4096;
        default: return (state >> 3) % 8;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 5) return 0;
    // Limits of 1..255 bytes make the overflow path reachable; 0 keeps the default (8 MiB).
    const std::size_t limit =
        data[0] == 0 ? warmslot::sse::parser::default_max_event_bytes : data[0];
    std::uint32_t state = (std::uint32_t{data[1]} << 24 | std::uint32_t{data[2]} << 16 |
                           std::uint32_t{data[3]} << 8 | data[4]) |
                          1u;
    const std::string_view stream(reinterpret_cast<const char*>(data) + 5, size - 5);

    warmslot::sse::parser whole(limit);
    std::vector<event> expected;
    whole.feed(stream, expected);

    warmslot::sse::parser split(limit);
    warmslot::sse::parser sunk(limit);
    std::vector<event> got;
    gather sink;
    for (std::size_t at = 0; at < stream.size();) {
        const auto chunk = stream.substr(at, next_length(state));
        split.feed(chunk, got);
        sunk.feed(chunk, sink);
        at += chunk.size();
    }
    check(got == expected);
    check(sink.events == expected);
    check(split.failed() == whole.failed() && sunk.failed() == whole.failed());
    check(split.pending() == whole.pending() && sunk.pending() == whole.pending());
    for (const auto& e : expected) check(e.data.size() + e.name.size() <= limit);

    // End of stream dispatches nothing and leaves a parser ready for the next stream.
    whole.finish(expected);
    check(expected.size() == got.size());
    check(!whole.pending() && !whole.failed());
    return 0;
}
