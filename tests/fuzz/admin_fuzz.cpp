// libFuzzer target: the admin request parsers (api/admin.hpp). The input is a POST
// /admin/snapshot body, a POST /admin/warm body, and, cut at NUL bytes, the arguments of
// `warmslot warm`. No input may crash or throw, and a warm-up request that parses builds a chat
// body whose stable prefix is exactly its system prompt and documents (what the warm-up saves
// is what a later question reuses).
//
//   build-asan/tests/fuzz/admin_fuzz -dict=tests/fuzz/request.dict -max_len=1048576
//       build-asan/fuzz/corpus/admin tests/fuzz/seeds/admin
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/admin.hpp"
#include "api/json_parse.hpp"
#include "routing/fingerprint.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void check_warm(const nlohmann::json& body) {
    const auto parsed = warmslot::api::parse_warm_request(body);
    const auto* w = std::get_if<warmslot::api::warm_request>(&parsed);
    if (w == nullptr) {
        check(!std::get<std::string>(parsed).empty());
        return;
    }
    const auto chat = warmslot::api::warm_chat_body(*w, "What changed?");
    (void)chat.dump();
    const auto fp =
        warmslot::routing::fingerprint_request(warmslot::routing::request_kind::chat, chat);
    check(fp.has_value());
    check(fp->model == w->model);
    check(fp->stable_levels == (w->system.empty() ? 0 : 1) + w->documents.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);

    const auto snapshot = warmslot::api::parse_snapshot_request(text);
    if (const auto* problem = std::get_if<std::string>(&snapshot)) check(!problem->empty());

    const auto body = warmslot::api::parse_json(text);
    if (!body.is_discarded()) check_warm(body);

    std::vector<std::string> args;
    std::size_t start = 0;
    while (start <= text.size()) {
        const auto end = std::min(text.find('\0', start), text.size());
        args.emplace_back(text.substr(start, end - start));
        start = end + 1;
    }
    const auto parsed = warmslot::api::parse_warm_args(args);
    if (const auto* problem = std::get_if<std::string>(&parsed)) check(!problem->empty());
    return 0;
}
