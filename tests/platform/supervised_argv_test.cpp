// The flags warmslot adds to a supervised backend's command.
#include "app/supervised_argv.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using argv = std::vector<std::string>;

warmslot::config::backend make(argv command, std::string slots = "/var/lib/warmslot/slots/b",
                               std::string host = "127.0.0.1") {
    warmslot::config::backend b;
    b.name = "b";
    b.command = std::move(command);
    b.host = std::move(host);
    b.port = b.host.starts_with('/') ? 0 : 41234;
    b.slot_save_path = std::move(slots);
    return b;
}

}  // namespace

TEST_CASE("supervised argv: the user's command first, then what warmslot needs") {
    struct row {
        const char* what;
        warmslot::config::backend b;
        argv expected;
    };
    const argv base = {"--host", "127.0.0.1", "--port", "41234"};
    const std::vector<row> rows = {
        {"bare command",
         make({"llama-server", "-m", "m.gguf"}),
         {"llama-server", "-m", "m.gguf", "--host", "127.0.0.1", "--port", "41234",
          "--slot-save-path", "/var/lib/warmslot/slots/b", "--metrics", "-np", "4"}},
        {"slots and metrics given",
         make({"llama-server", "-m", "m.gguf", "-np", "2", "--metrics"}),
         {"llama-server", "-m", "m.gguf", "-np", "2", "--metrics", "--host", "127.0.0.1", "--port",
          "41234", "--slot-save-path", "/var/lib/warmslot/slots/b"}},
        {"--parallel=3 counts as -np",
         make({"llama-server", "--parallel=3"}),
         {"llama-server", "--parallel=3", "--host", "127.0.0.1", "--port", "41234",
          "--slot-save-path", "/var/lib/warmslot/slots/b", "--metrics"}},
        {"no slot directory: no --slot-save-path",
         make({"llama-server"}, ""),
         {"llama-server", "--host", "127.0.0.1", "--port", "41234", "--metrics", "-np", "4"}},
        {"-npx is not -np",
         make({"llama-server", "-npx"}, ""),
         {"llama-server", "-npx", "--host", "127.0.0.1", "--port", "41234", "--metrics", "-np",
          "4"}},
        {"a UNIX socket: its path as the host, no port",
         make({"llama-server"}, "", "/tmp/warmslot-a1b2c3/0.sock"),
         {"llama-server", "--host", "/tmp/warmslot-a1b2c3/0.sock", "--metrics", "-np", "4"}},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(warmslot::app::supervised_argv(r.b) == r.expected);
    }
}

TEST_CASE(
    "supervised_argv: tenant isolation turns the RAM prompt cache off unless the command set it") {
    auto b = make({"llama-server", "-np", "2"}, "");
    CHECK(warmslot::app::supervised_argv(b, true) ==
          std::vector<std::string>{"llama-server", "-np", "2", "--host", "127.0.0.1", "--port",
                                   "41234", "--metrics", "--cache-ram", "0"});
    b = make({"llama-server", "-np", "2", "-cram", "0"}, "");
    CHECK(warmslot::app::supervised_argv(b, true) ==
          std::vector<std::string>{"llama-server", "-np", "2", "-cram", "0", "--host", "127.0.0.1",
                                   "--port", "41234", "--metrics"});
    CHECK(warmslot::app::supervised_argv(make({"llama-server", "-np", "2"}, ""), false).back() ==
          "--metrics");
}

TEST_CASE("supervised env: the allow-list passes, secrets stay, env wins") {
    const std::vector<std::string> parent = {
        "PATH=/usr/bin:/bin",
        "HOME=/var/lib/warmslot",
        "LANG=C.UTF-8",
        "LC_ALL=C.UTF-8",
        "TZ=UTC",
        "LD_LIBRARY_PATH=/opt/cuda/lib64",
        "CUDA_VISIBLE_DEVICES=0,1",
        "HIP_VISIBLE_DEVICES=0",
        "ROCR_VISIBLE_DEVICES=0",
        "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1",
        "LLAMA_ARG_THREADS=8",
        "WARMSLOT_API_KEY=sk-warmslot-secret",
        "OPENAI_API_KEY=sk-openai",
        "AWS_SECRET_ACCESS_KEY=aws",
        "GITHUB_TOKEN=ghp",
        "PATHOLOGICAL=1",  // a prefix of an allowed name is not that name
        "LC_=x",           // a prefix alone is not a name with it
        "noequals",
        "=C:=C:\\x",
    };
    auto b = make({"llama-server"});
    b.env = {{"CUDA_VISIBLE_DEVICES", "1"}, {"HF_TOKEN", "hf"}};
    const std::vector<std::string> expected = {
        "PATH=/usr/bin:/bin",
        "HOME=/var/lib/warmslot",
        "LANG=C.UTF-8",
        "LC_ALL=C.UTF-8",
        "TZ=UTC",
        "LD_LIBRARY_PATH=/opt/cuda/lib64",
        "HIP_VISIBLE_DEVICES=0",
        "ROCR_VISIBLE_DEVICES=0",
        "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1",
        "LLAMA_ARG_THREADS=8",
        "CUDA_VISIBLE_DEVICES=1",
        "HF_TOKEN=hf",
    };
    CHECK(warmslot::app::supervised_env(b, parent, false, "") == expected);
}

TEST_CASE("supervised env: Windows names ignore case") {
    using warmslot::app::passes_to_backend;
    CHECK(passes_to_backend("SystemRoot", true));
    CHECK(passes_to_backend("Path", true));
    CHECK(passes_to_backend("ProgramFiles(x86)", true));
    CHECK(passes_to_backend("cuda_path", true));
    CHECK_FALSE(passes_to_backend("SystemRoot", false));
    CHECK_FALSE(passes_to_backend("Path", false));
    CHECK_FALSE(passes_to_backend("USERDOMAIN", true));
    auto b = make({"llama-server.exe"});
    b.env = {{"path", "C:\\llama"}};
    CHECK(warmslot::app::supervised_env(b, {"Path=C:\\Windows", "SystemRoot=C:\\Windows"}, true,
                                        "") ==
          std::vector<std::string>{"SystemRoot=C:\\Windows", "path=C:\\llama"});
}

TEST_CASE("supervised env: the key warmslot gave the process is its only LLAMA_API_KEY") {
    warmslot::config::backend b;
    b.command = {"llama-server"};
    b.env = {{"LLAMA_API_KEY", "from-config"}, {"GGML_X", "1"}};
    CHECK(warmslot::app::supervised_env(b, {"LLAMA_API_KEY=from-parent", "PATH=/bin"}, false,
                                        "warmslot-0123abcd") ==
          std::vector<std::string>{"PATH=/bin", "GGML_X=1", "LLAMA_API_KEY=warmslot-0123abcd"});
    // A url backend, or none given: the variables pass as before.
    CHECK(warmslot::app::supervised_env(b, {"LLAMA_API_KEY=from-parent"}, false, "") ==
          std::vector<std::string>{"LLAMA_API_KEY=from-config", "GGML_X=1"});
    // Never on the command line, which every local user can read.
    b.child_key = std::make_shared<warmslot::config::child_secret>();
    b.child_key->set("warmslot-0123abcd");
    b.port = 8081;
    for (const auto& a : warmslot::app::supervised_argv(b))
        CHECK(a.find("warmslot-0123") == std::string::npos);
}

TEST_CASE("random_child_key: 256 bits of hex, fresh each time") {
    const auto a = warmslot::app::random_child_key();
    const auto b = warmslot::app::random_child_key();
    CHECK(a.size() == 9 + 64);
    CHECK(a.starts_with("warmslot-"));
    CHECK(a.find_first_not_of("0123456789abcdef", 9) == std::string::npos);
    CHECK(a != b);
}
