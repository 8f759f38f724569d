// A failed restore, judged with the file in hand: llama-server's one answer for an unreadable
// file and for a full KV cache drops only a file that warmslot itself sees damaged.
#include "cache/slot_file.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace warmslot::cache;
namespace fs = std::filesystem;

namespace {

// A file laid out as llama_state_seq_save_file writes it: magic, version, token count, tokens,
// then `state` bytes of memory state.
std::vector<unsigned char> state_file(std::uint32_t magic, std::uint32_t tokens,
                                      std::size_t state) {
    std::vector<unsigned char> out;
    const auto u32 = [&](std::uint32_t v) {
        for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
    };
    u32(magic);
    u32(3);
    u32(tokens);
    for (std::uint32_t t = 0; t < tokens; ++t) u32(t);
    out.insert(out.end(), state, 0x5a);
    return out;
}

fs::path write(const fs::path& dir, const std::string& name, const std::vector<unsigned char>& b) {
    const auto p = dir / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
}

}  // namespace

TEST_CASE("check_slot_file: size, magic and token count of a sequence-state file") {
    const fs::path dir = fs::temp_directory_path() /
                         ("warmslot-slot-file-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    const auto good = state_file(0x67677371u, 100, 5000);
    const auto good_path = write(dir, "good.bin", good);
    CHECK(check_slot_file(good_path, good.size()) == file_state::intact);
    CHECK(check_slot_file(good_path, good.size() + 1) ==
          file_state::damaged);  // not what was saved
    auto truncated = good;
    truncated.resize(good.size() / 2);
    CHECK(check_slot_file(write(dir, "cut.bin", truncated), good.size()) == file_state::damaged);
    const auto other = state_file(0x12345678u, 100, 5000);
    CHECK(check_slot_file(write(dir, "magic.bin", other), other.size()) == file_state::damaged);
    auto too_many = state_file(0x67677371u, 10, 0);
    too_many[8] = 0xff;  // 255 tokens claimed, 10 present
    CHECK(check_slot_file(write(dir, "count.bin", too_many), too_many.size()) ==
          file_state::damaged);
    CHECK(check_slot_file(dir / "missing.bin", good.size()) == file_state::damaged);
    const std::vector<unsigned char> tiny{0x71, 0x73};
    CHECK(check_slot_file(write(dir, "tiny.bin", tiny), tiny.size()) == file_state::damaged);
    fs::remove_all(dir);
}

TEST_CASE("a failed restore keeps an intact file when the KV cache may merely be full") {
    const std::string ambiguous =
        R"({"error":{"code":400,"message":"Unable to restore slot: No available space in KV cache or invalid slot save file","type":"invalid_request_error"}})";
    const std::string too_long =
        R"({"error":{"code":400,"message":"Unable to restore slot: Restored prompt does not fit in the slot context","type":"invalid_request_error"}})";
    struct row {
        const char* what;
        slot_call_result r;
        file_state f;
        restore_failure expected;
    };
    const row rows[] = {
        {"no free cells, the file intact",
         {false, 400, ambiguous},
         file_state::intact,
         restore_failure::keep_file},
        {"the same answer, the file damaged",
         {false, 400, ambiguous},
         file_state::damaged,
         restore_failure::drop_file},
        {"does not fit the slot",
         {false, 400, too_long},
         file_state::intact,
         restore_failure::drop_file},
        {"timeout", {true, 0, ""}, file_state::damaged, restore_failure::keep_file},
        {"invalid slot id",
         {false, 400, R"({"error":{"message":"Invalid slot ID"}})"},
         file_state::damaged,
         restore_failure::keep_file},
    };
    for (const auto& r : rows) {
        CAPTURE(r.what);
        CHECK(judge_restore_failure(r.r, r.f) == r.expected);
    }
}
