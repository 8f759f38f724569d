// libFuzzer target: the rewrite engine (rewrite/rewrite.hpp) on a client's body, under the rules
// of config/warmslot.example.yaml (read through the config reader: the qwen3-8b model) and under
// the same rules with everything the example shows in comments switched on (system messages to
// the front, document order, <document> delimiters, edit ids, short documents). Each body goes
// through the chat, Messages and Responses paths of the request path (service/explain.cpp) twice
// with one fresh memory, remembering in between, as two requests in a row would. No input may
// crash, or throw anything but the regex errors the request path catches; a rewritten body of
// valid UTF-8 stays valid UTF-8 (it dumps strictly), and a body no rule changed is sent as is.
//
//   build-asan/tests/fuzz/rewrite_fuzz -dict=tests/fuzz/request.dict -max_len=1048576
//       build-asan/fuzz/corpus/rewrite tests/fuzz/seeds/rewrite
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include "api/json_parse.hpp"
#include "config/config.hpp"
#include "rewrite/rewrite.hpp"

namespace {

namespace rw = warmslot::rewrite;
using nlohmann::json;

void check(bool ok) {
    if (!ok) std::abort();
}

struct books {
    warmslot::config::rewrite_settings settings;
    rw::compiled_rules example;
    rw::compiled_rules all_on;
};

warmslot::config::rewrite_rules all_rules_on(warmslot::config::rewrite_rules r) {
    r.system_to_front = true;
    r.document_order = true;
    r.edits = warmslot::config::edit_mode::append;
    r.document_min_bytes = 64;
    r.document_delimiters = {{"<document[^>]*>", "</document>"}};
    r.edit_id = "<document id=\"([^\"]+)\"";
    r.max_note_bytes = 256;
    return r;
}

const books& rules() {
    static const books b = [] {
        const auto cfg = warmslot::config::load_file(
            WARMSLOT_EXAMPLE_CONFIG,
            [](const std::string&) { return std::optional<std::string>(); });
        const auto& example = cfg.rewrite.for_model("qwen3-8b");
        return books{cfg.rewrite, rw::compiled_rules(example),
                     rw::compiled_rules(all_rules_on(example))};
    }();
    return b;
}

enum class shape { chat, messages, responses };

// One request: the body in its chat form, rewritten, and back in its own shape.
void request(const rw::compiled_rules& r, rw::memory& mem, shape s, const json& body) {
    const json chat = s == shape::messages    ? rw::messages_to_chat(body)
                      : s == shape::responses ? rw::responses_to_chat(body)
                                              : body;
    if (!chat.is_object() || !chat.contains("messages") || !chat["messages"].is_array()) return;
    std::optional<rw::result> out;
    try {
        out = rw::rewrite_chat(r, mem, chat);
    } catch (const std::regex_error&) {
        return;
    }
    (void)rw::describe(out->applied);
    if (!out->changed()) {
        check(out->body == chat);
        return;
    }
    json sent = s == shape::messages    ? rw::chat_to_messages(out->body)
                : s == shape::responses ? rw::chat_to_responses(out->body, body)
                                        : out->body;
    (void)sent.dump();
    mem.remember(out->update);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto body =
        warmslot::api::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
    // The request path answers 400 to any other body before the rules see it.
    if (!body.is_object()) return 0;
    const auto& b = rules();
    for (const auto* r : {&b.example, &b.all_on}) {
        for (const auto s : {shape::chat, shape::messages, shape::responses}) {
            rw::memory mem(b.settings.memory);
            request(*r, mem, s, body);
            request(*r, mem, s, body);
        }
    }
    return 0;
}
