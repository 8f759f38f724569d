// The progress of a warm-up: its events both ways, the slot's token count read from GET /slots,
// and the line `warmslot warm` prints.
#include "api/warm_progress.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "api/admin.hpp"

using warmslot::api::warm_progress;

TEST_CASE("warm progress: the event reads back as written; anything else is no progress") {
    const warm_progress p{"prefill", 4096, 12058, "gpu-0", 1};
    const auto back = warmslot::api::warm_progress_of(warmslot::api::to_json(p));
    REQUIRE(back);
    CHECK(back->phase == "prefill");
    CHECK(back->done == 4096);
    CHECK(back->total == 12058);
    CHECK(back->backend == "gpu-0");
    CHECK(back->slot == 1);
    for (const char* bad :
         {R"([])", R"({})", R"({"phase":"prefill","done":1})", R"({"phase":"","done":1,"total":2})",
          R"({"phase":"save","done":-1,"total":2})", R"({"phase":"save","done":"1","total":2})"}) {
        INFO(bad);
        CHECK_FALSE(warmslot::api::warm_progress_of(nlohmann::json::parse(bad)));
    }
}

TEST_CASE("warm progress: a slot's tokens from llama-server's GET /slots") {
    const std::string slots =
        R"([{"id":0,"is_processing":true,"n_prompt_tokens":7680,"id_task":11},)"
        R"({"id":1,"is_processing":false},{"id":2,"n_prompt_tokens":-1}])";
    CHECK(warmslot::api::slot_tokens(slots, 0) == 7680u);
    CHECK_FALSE(warmslot::api::slot_tokens(slots, 1));  // never ran a task
    CHECK_FALSE(warmslot::api::slot_tokens(slots, 2));
    CHECK_FALSE(warmslot::api::slot_tokens(slots, 3));  // not listed
    CHECK_FALSE(warmslot::api::slot_tokens("not json", 0));
    CHECK_FALSE(warmslot::api::slot_tokens(R"({"id":0})", 0));
}

TEST_CASE("warm progress: the printed line") {
    using warmslot::api::progress_line;
    CHECK(progress_line({"prefill", 4096, 12058, "b", 0}, 0) ==
          "prefill  4096 / 12058 tokens  33%");
    CHECK(progress_line({"prefill", 4096, 12058, "b", 0}, 800) ==
          "prefill  4096 / 12058 tokens  33%  800 tokens/s  10 s left");
    CHECK(progress_line({"save", 12058, 12058, "b", 0}, 800) ==
          "save     12058 / 12058 tokens  100%");
    // More done than the total (a count read late) shows the total; no total, no percent.
    CHECK(progress_line({"prefill", 13000, 12058, "b", 0}, 0) ==
          "prefill  12058 / 12058 tokens  100%");
    CHECK(progress_line({"prefill", 0, 0, "b", 0}, 0) == "prefill  0 / 0 tokens  0%");
}

TEST_CASE("parse_warm_args: --quiet and --json take no value") {
    const auto ok =
        warmslot::api::parse_warm_args({"--model", "m", "--quiet", "--doc", "a", "--json"});
    REQUIRE(std::holds_alternative<warmslot::api::warm_args>(ok));
    const auto& a = std::get<warmslot::api::warm_args>(ok);
    CHECK(a.quiet);
    CHECK(a.json);
    CHECK(a.doc_files == std::vector<std::string>{"a"});
    const auto plain = std::get<warmslot::api::warm_args>(
        warmslot::api::parse_warm_args({"--model", "m", "--doc", "a"}));
    CHECK_FALSE(plain.quiet);
    CHECK_FALSE(plain.json);
}
