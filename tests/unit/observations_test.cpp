// Reading llama-server's /props, /slots, /lora-adapters and /v1/models as tables: bad types are
// refused (std::nullopt), never thrown; and the backend identity slot files are keyed by.
#include "routing/observations.hpp"

#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace routing = warmslot::routing;
using nlohmann::json;

TEST_CASE("read_props: the fields the monitor uses, and refusal of wrong types") {
    const json good = json::parse(R"({"total_slots":2,"build_info":"b1-80fb11a",
        "model_path":"/m/a.gguf","model_alias":"a","model_ftype":"Q8_0",
        "default_generation_settings":{"n_ctx":8192,"params":{}}})");
    const auto r = routing::read_props(good);
    REQUIRE(r);
    CHECK(r->info.total_slots == 2);
    CHECK(r->info.n_ctx_per_slot == 8192);
    CHECK(r->info.model_path == "/m/a.gguf");
    CHECK(r->model_alias == "a");
    CHECK(r->info.model_type == "\"Q8_0\"");
    CHECK(routing::read_props(json::parse(R"({"total_slots":1})")));  // absent fields: defaults
    CHECK_FALSE(r->sleeping);
    const auto asleep = routing::read_props(json::parse(R"({"total_slots":1,"is_sleeping":true})"));
    REQUIRE(asleep);
    CHECK(asleep->sleeping);

    const char* bad[] = {R"({"total_slots":"2"})",
                         R"({"total_slots":2.5})",
                         R"({"total_slots":-1})",
                         R"({"build_info":7})",
                         R"({"model_path":["x"]})",
                         R"({"model_alias":{}})",
                         R"({"default_generation_settings":[]})",
                         R"({"default_generation_settings":{"n_ctx":"big"}})",
                         R"({"default_generation_settings":{"n_ctx":-5}})",
                         R"({"model_ftype":[1]})",
                         R"({"is_sleeping":"yes"})",
                         R"([1,2])",
                         R"("ok")"};
    for (const char* text : bad) {
        CAPTURE(text);
        CHECK_FALSE(routing::read_props(json::parse(text)));
    }
    CHECK_FALSE(routing::read_props(json()));                            // no answer
    CHECK_FALSE(routing::read_props(json::parse("x", nullptr, false)));  // not JSON
}

TEST_CASE("read_slots: ids, processing, tokens; a wrong type refuses the whole answer") {
    const auto r = routing::read_slots(json::parse(
        R"([{"id":0,"is_processing":false,"n_prompt_tokens":120,"id_task":7},{"id":1,"is_processing":true}])"));
    REQUIRE(r);
    REQUIRE(r->size() == 2);
    CHECK((*r)[0].n_prompt_tokens == 120u);
    CHECK((*r)[0].task == 7);
    CHECK_FALSE((*r)[1].task);
    CHECK((*r)[1].processing);
    CHECK_FALSE((*r)[1].n_prompt_tokens);
    const char* bad[] = {R"([{"id":"0"}])",
                         R"([{"id":0,"is_processing":"no"}])",
                         R"([{"id":0,"n_prompt_tokens":"12"}])",
                         R"([3])",
                         R"({"id":0})",
                         R"([{"id":-1}])",
                         R"([{"id":0,"id_task":"3"}])"};
    for (const char* text : bad) {
        CAPTURE(text);
        CHECK_FALSE(routing::read_slots(json::parse(text)));
    }
}

TEST_CASE("latest_task and task_counter_went_back: a new process numbers its tasks from 0") {
    std::vector<routing::observed_slot> slots(3);
    CHECK(routing::latest_task(slots) == -1);
    slots[1].task = 40;
    slots[2].task = 12;
    CHECK(routing::latest_task(slots) == 40);
    struct row {
        std::int64_t before, now;
        bool restarted;
    };
    const row rows[] = {
        {-1, -1, false},  // nothing ran yet, in either reading
        {-1, 3, false},   // the first tasks
        {40, 40, false},  // idle
        {40, 52, false},  // more tasks
        {40, 2, true},    // numbered from 0 again
        {40, -1, true},   // slots that ran tasks show none: a new process
    };
    for (const auto& r : rows) {
        CAPTURE(r.before);
        CAPTURE(r.now);
        CHECK(routing::task_counter_went_back(r.before, r.now) == r.restarted);
    }
}

TEST_CASE("read_lora: adapters and scales in id order; unexpected shapes refused") {
    CHECK(routing::read_lora(json::array()) == std::string());
    const auto r = routing::read_lora(json::parse(
        R"([{"id":1,"path":"b.gguf","scale":0.5},{"id":0,"path":"a.gguf","scale":1.0}])"));
    CHECK(r == std::string("a.gguf@1.0;b.gguf@0.5"));
    CHECK_FALSE(routing::read_lora(json::parse(R"([{"id":0,"path":"a","scale":"1"}])")));
    CHECK_FALSE(routing::read_lora(json::parse(R"({"error":{}})")));
}

TEST_CASE("read_models: ids and the model's shape") {
    const auto r = routing::read_models(json::parse(
        R"({"data":[{"id":"m","meta":{"n_params":1000,"size":4096,"n_vocab":260,"n_embd":64}}]})"));
    REQUIRE(r.ids.size() == 1);
    CHECK(r.meta == "n_params=1000,size=4096,n_vocab=260,n_embd=64");
    CHECK(routing::read_models(json::parse(R"({"data":"x"})")).ids.empty());
}

TEST_CASE("kv_flags: the flags of a command line that change the KV, with their values") {
    const std::vector<std::string> argv{"llama-server",
                                        "-m",
                                        "m.gguf",
                                        "-t",
                                        "4",
                                        "--rope-freq-base",
                                        "10000",
                                        "--lora-scaled",
                                        "a.gguf",
                                        "0.5",
                                        "--override-kv=a.b=int:3",
                                        "-fa",
                                        "-np",
                                        "2",
                                        "-ctk",
                                        "q8_0",
                                        "--swa-full"};
    CHECK(routing::kv_flags(argv) ==
          "--rope-freq-base 10000 --lora-scaled a.gguf 0.5 --override-kv=a.b=int:3 -fa -ctk q8_0 "
          "--swa-full");
    CHECK(routing::kv_flags({"llama-server", "-m", "m.gguf", "-c", "8192"}).empty());
}

TEST_CASE("kv_env: the KV-changing variables of a backend's environment, with their values") {
    const std::map<std::string, std::string> env{{"LLAMA_ARG_YARN_EXT_FACTOR", "0.5"},
                                                 {"LLAMA_ARG_ROPE_FREQ_SCALE", "0.25"},
                                                 {"LLAMA_ARG_THREADS", "8"},  // no KV change
                                                 {"LLAMA_ARG_CACHE_TYPE_K", "q8_0"},
                                                 {"ROPE_FREQ_SCALE", "2"}};
    const auto lookup = [&](const std::string& name) -> std::optional<std::string> {
        const auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
    };
    CHECK(
        routing::kv_env(lookup) ==
        "LLAMA_ARG_ROPE_FREQ_SCALE=0.25 LLAMA_ARG_YARN_EXT_FACTOR=0.5 LLAMA_ARG_CACHE_TYPE_K=q8_0");
    CHECK(routing::kv_env([](const std::string&) { return std::nullopt; }).empty());
}

TEST_CASE("rolls_back_to_checkpoints_only: llama.cpp's hybrid and recurrent architectures") {
    for (const char* arch : {"qwen35", "qwen3next", "granitehybrid", "nemotron_h", "lfm2", "mamba2",
                             "rwkv7", "falcon-h1", "jamba"}) {
        CHECK(routing::rolls_back_to_checkpoints_only(arch));
    }
    for (const char* arch : {"llama", "qwen3", "gemma2", "gemma3", "", "QWEN35"}) {
        CHECK_FALSE(routing::rolls_back_to_checkpoints_only(arch));
    }
}

TEST_CASE("ctx_checkpoints_of: the flag in its three names and two forms, else the variable") {
    const auto none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
    const auto env = [](const std::string& name) -> std::optional<std::string> {
        if (name == "LLAMA_ARG_CTX_CHECKPOINTS") return "3";
        return std::nullopt;
    };
    using argv = std::vector<std::string>;
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "-m", "x"}, none) == std::nullopt);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "--ctx-checkpoints", "0"}, none) == 0);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "-ctxcp", "4"}, none) == 4);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "--swa-checkpoints=2"}, none) == 2);
    CHECK(routing::ctx_checkpoints_of(argv{"s", "-ctxcp", "4", "--ctx-checkpoints", "0"}, none) ==
          0);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server"}, env) == 3);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "-ctxcp", "1"}, env) == 1);  // flag wins
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "-ctxcp", "x"}, none) == std::nullopt);
    CHECK(routing::ctx_checkpoints_of(argv{"llama-server", "-ctxcp"}, none) == std::nullopt);
    // The program's own name is never read as a flag.
    CHECK(routing::ctx_checkpoints_of(argv{"-ctxcp", "5"}, none) == std::nullopt);
}

TEST_CASE("sleep_idle_of: --sleep-idle-seconds in its two forms; -1 and junk are none") {
    using argv = std::vector<std::string>;
    CHECK(routing::sleep_idle_of(argv{"llama-server", "-m", "x"}) == std::nullopt);
    CHECK(routing::sleep_idle_of(argv{"llama-server", "--sleep-idle-seconds", "300"}) == 300);
    CHECK(routing::sleep_idle_of(argv{"llama-server", "--sleep-idle-seconds=5"}) == 5);
    CHECK(routing::sleep_idle_of(argv{"s", "--sleep-idle-seconds", "5", "--sleep-idle-seconds",
                                      "-1"}) == std::nullopt);  // the last one wins: off
    CHECK(routing::sleep_idle_of(argv{"s", "--sleep-idle-seconds", "x"}) == std::nullopt);
    CHECK(routing::sleep_idle_of(argv{"s", "--sleep-idle-seconds"}) == std::nullopt);
    CHECK(routing::sleep_idle_of(argv{"--sleep-idle-seconds", "5"}) == std::nullopt);
}

TEST_CASE("identity_of: a new file stamp, adapter or flag makes a new identity") {
    routing::backend_info info;
    info.model_path = "/m/a.gguf";
    info.build_info = "b1";
    info.total_slots = 2;
    info.n_ctx_per_slot = 4096;
    const auto base = routing::identity_of(info, "100@5", "");
    CHECK(base == "/m/a.gguf|b1|2|4096|100@5");  // unchanged for backends without extras
    CHECK(routing::identity_of(info, "100@6", "") != base);
    CHECK(routing::identity_of(info, "100@5", "--rope-freq-base 1") != base);
    CHECK(routing::identity_of(info, "100@5", "", "LLAMA_ARG_ROPE_FREQ_BASE=1") != base);
    CHECK(routing::identity_of(info, "100@5", "", "LLAMA_ARG_ROPE_FREQ_BASE=1") !=
          routing::identity_of(info, "100@5", "", "LLAMA_ARG_ROPE_FREQ_BASE=2"));
    auto with_lora = info;
    with_lora.lora = "x.gguf@1.0";
    CHECK(routing::identity_of(with_lora, "100@5", "") != base);
    // Without the file's stamp, the model's type and shape tell a replaced model.
    auto remote = info;
    remote.model_meta = "size=1";
    auto other = info;
    other.model_meta = "size=2";
    CHECK(routing::identity_of(remote, "?", "") != routing::identity_of(other, "?", ""));
    CHECK(routing::identity_of(remote, "1@1", "") == routing::identity_of(other, "1@1", ""));
}

TEST_CASE("identity_of: a model's content identity stands for it at any path") {
    routing::backend_info here;
    here.model_path = "/models/a.gguf";
    here.build_info = "b1";
    here.total_slots = 2;
    here.n_ctx_per_slot = 4096;
    auto there = here;
    there.model_path = "/srv/copy/renamed.gguf";
    const std::string content = "gguf:0123456789abcdef0123456789abcdef";
    const auto id = routing::identity_of(here, content, "");
    CHECK(id == "2|gguf:0123456789abcdef0123456789abcdef|b1|2|4096");
    CHECK(routing::identity_of(there, content, "") == id);
    CHECK(routing::identity_of(here, "gguf:ffff", "") != id);
    // The rest of the identity stays: slots, context, adapters, flags, environment.
    auto slots = there;
    slots.total_slots = 4;
    CHECK(routing::identity_of(slots, content, "") != id);
    CHECK(routing::identity_of(there, content, "-fa") != id);
    CHECK(routing::identity_of(there, content, "", "LLAMA_ARG_ROPE_FREQ_BASE=1") != id);
}
