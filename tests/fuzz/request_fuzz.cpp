// libFuzzer target: a client's request body on its way through the cache. The body is parsed
// (api::parse_json), fingerprinted as a chat and as a completion request, converted from the
// Responses and Messages shapes to their chat view and fingerprinted again, and dumped, as the
// request path does (service/forward.cpp). No input may crash, throw or break these properties:
// - a fingerprint's levels grow in bytes, end at total_bytes, and stable_levels fits in them;
// - the dump of a parsed body parses back to the same fingerprint (what is sent is what was
//   routed);
// - a chat view dumps, and its breakpoint fits in its messages.
//
//   build-asan/tests/fuzz/request_fuzz -dict=tests/fuzz/request.dict -max_len=1048576
//       build-asan/fuzz/corpus/request tests/fuzz/seeds/request
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "api/chat_view.hpp"
#include "api/endpoints.hpp"
#include "api/json_parse.hpp"
#include "routing/fingerprint.hpp"

namespace {

using warmslot::routing::fingerprint;
using warmslot::routing::request_kind;

void check(bool ok) {
    if (!ok) std::abort();
}

void check_levels(const fingerprint& fp) {
    std::uint64_t bytes = 0;
    for (const auto& level : fp.levels) {
        check(level.bytes >= bytes);
        bytes = level.bytes;
    }
    check(fp.total_bytes == bytes);
    check(fp.stable_levels <= fp.levels.size());
    check(fp.longest_segment_bytes <= fp.total_bytes);
}

// Fingerprints `body` as `kind`; the same again after a dump and a parse.
void check_fingerprint(request_kind kind, const nlohmann::json& body, const std::string& dumped) {
    const auto fp = warmslot::routing::fingerprint_request(kind, body);
    if (fp) check_levels(*fp);
    const auto again = warmslot::api::parse_json(dumped);
    check(!again.is_discarded());
    const auto fp2 = warmslot::routing::fingerprint_request(kind, again);
    check(fp.has_value() == fp2.has_value());
    if (fp) {
        check(fp->model == fp2->model);
        check(fp->levels == fp2->levels);
        check(fp->stable_levels == fp2->stable_levels);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto body = warmslot::api::parse_json(text);
    if (body.is_discarded()) return 0;
    const std::string dumped = body.dump();
    check_fingerprint(request_kind::chat, body, dumped);
    check_fingerprint(request_kind::completion, body, dumped);
    for (const auto shape :
         {warmslot::api::api_shape::responses, warmslot::api::api_shape::messages}) {
        const auto view = warmslot::api::to_chat_view(shape, body);
        if (!view) continue;
        const std::string chat = view->body.dump();
        check_fingerprint(request_kind::chat, view->body, chat);
        if (view->breakpoint) {
            const auto messages = view->body.find("messages");
            check(messages != view->body.end() && messages->is_array());
            check(*view->breakpoint <= messages->size());
        }
    }
    return 0;
}
