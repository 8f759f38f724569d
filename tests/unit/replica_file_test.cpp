// A replica's slot file brought into another slot directory: which one is taken, when a copy
// may be made, and what a link or copy leaves on disk when the source is good, gone, cut short
// or the deadline passes.
#include "cache/replica_file.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "slot_file_fixtures.hpp"

using namespace warmslot::cache;
using namespace slot_file_fixtures;
namespace fs = std::filesystem;

namespace {

snapshot row(const std::string& identity, std::uint64_t tokens, std::uint64_t bytes) {
    snapshot s;
    s.key = "ab";
    s.file = file_name_for("ab");
    s.identity = identity;
    s.tokens = tokens;
    s.bytes = bytes;
    return s;
}

// Names in `dir` other than the source directory's files.
std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    return out;
}

struct dirs {
    fs::path root =
        fs::temp_directory_path() / ("warmslot-replica-" + std::to_string(std::random_device{}()));
    fs::path a = root / "a";
    fs::path b = root / "b";
    dirs() {
        fs::create_directories(a);
        fs::create_directories(b);
    }
    ~dirs() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    bring_request request(std::uint64_t bytes, bool link) const {
        bring_request r;
        r.source = a / file_name_for("ab");
        r.bytes = bytes;
        r.target = b / file_name_for("ab");
        r.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        r.allow_link = link;
        return r;
    }
};

}  // namespace

TEST_CASE("pick_replica_file: the first row of the same identity, with tokens, within budget") {
    std::vector<replica_offer> offers = {
        {"other-model", "/x", row("id-2", 100, 1000)},
        {"empty", "/y", row("id-1", 0, 1000)},
        {"too-big", "/z", row("id-1", 100, 5000)},
        {"a", "/a", row("id-1", 100, 1000)},
        {"b", "/b", row("id-1", 100, 900)},
    };
    CHECK(pick_replica_file(offers, "id-1", 4096) == std::optional<std::size_t>(3));
    CHECK(pick_replica_file(offers, "id-1", 10000) == std::optional<std::size_t>(2));
    CHECK(pick_replica_file(offers, "id-1", 950) == std::optional<std::size_t>(4));
    CHECK_FALSE(pick_replica_file(offers, "id-1", 500));
    CHECK_FALSE(pick_replica_file(offers, "id-3", 10000));
    CHECK_FALSE(pick_replica_file({}, "id-1", 10000));
}

TEST_CASE("copy_allowed: a copy leaves a tenth of its size free") {
    CHECK(copy_allowed(1000, std::nullopt));
    CHECK(copy_allowed(1000, 1100));
    CHECK(copy_allowed(1000, 5000));
    CHECK_FALSE(copy_allowed(1000, 1099));
    CHECK_FALSE(copy_allowed(1000, 1000));
    CHECK_FALSE(copy_allowed(1000, 0));
}

TEST_CASE("bring_slot_file: a link or a copy of an intact file, complete under its own name") {
    const dirs d;
    const auto content = state_file(50, 3 << 20);  // more than one copy chunk
    write(d.a / file_name_for("ab"), content);
    SUBCASE("linked") {
        CHECK(bring_slot_file(d.request(content.size(), true)) == bring_result::linked);
        CHECK(fs::equivalent(d.a / file_name_for("ab"), d.b / file_name_for("ab")));
    }
    SUBCASE("copied") {
        CHECK(bring_slot_file(d.request(content.size(), false)) == bring_result::copied);
        CHECK_FALSE(fs::equivalent(d.a / file_name_for("ab"), d.b / file_name_for("ab")));
    }
    CHECK(read(d.b / file_name_for("ab")) == content);
    CHECK(names_in(d.b) == std::vector<std::string>{file_name_for("ab")});
    CHECK(read(d.a / file_name_for("ab")) == content);  // the source is untouched
}

TEST_CASE("bring_slot_file: a missing, cut or foreign source is a miss and leaves nothing") {
    const dirs d;
    const auto content = state_file(50, 4096);
    bool link = false;
    SUBCASE("link") { link = true; }
    SUBCASE("copy") { link = false; }
    CHECK(bring_slot_file(d.request(content.size(), link)) == bring_result::missing);
    auto cut = content;
    cut.resize(content.size() / 2);  // a save still being written, or a truncated file
    write(d.a / file_name_for("ab"), cut);
    CHECK(bring_slot_file(d.request(content.size(), link)) == bring_result::missing);
    auto foreign = content;
    foreign[0] = 'x';  // not a sequence-state file
    write(d.a / file_name_for("ab"), foreign);
    CHECK(bring_slot_file(d.request(content.size(), link)) == bring_result::missing);
    CHECK(names_in(d.b).empty());
    CHECK(read(d.a / file_name_for("ab")) == foreign);
}

TEST_CASE("bring_slot_file: a copy past its deadline gives up and leaves nothing") {
    const dirs d;
    const auto content = state_file(50, 3 << 20);
    write(d.a / file_name_for("ab"), content);
    auto r = d.request(content.size(), false);
    r.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    CHECK(bring_slot_file(r) == bring_result::too_slow);
    CHECK(names_in(d.b).empty());
}

TEST_CASE("bring_slot_file: a directory that cannot be written fails without a trace") {
    const dirs d;
    const auto content = state_file(50, 4096);
    write(d.a / file_name_for("ab"), content);
    auto r = d.request(content.size(), true);
    r.target = d.root / "no-such-dir" / file_name_for("ab");
    CHECK(bring_slot_file(r) == bring_result::failed);
    CHECK(read(d.a / file_name_for("ab")) == content);
}

TEST_CASE("bring_slot_file: a file already in place is replaced whole, never written into") {
    const dirs d;
    const auto content = state_file(50, 4096);
    write(d.a / file_name_for("ab"), content);
    const auto stale = state_file(10, 100);  // e.g. a late save's leftover without a row
    write(d.b / file_name_for("ab"), stale);
    CHECK(bring_slot_file(d.request(content.size(), true)) == bring_result::linked);
    CHECK(read(d.b / file_name_for("ab")) == content);
    CHECK(names_in(d.b) == std::vector<std::string>{file_name_for("ab")});
}

TEST_CASE("bring_slot_file: the same directory under another spelling is the file in place") {
    const dirs d;
    const auto content = state_file(50, 4096);
    write(d.a / file_name_for("ab"), content);
    auto r = d.request(content.size(), true);
    r.target = d.b / ".." / "a" / file_name_for("ab");
    CHECK(bring_slot_file(r) == bring_result::linked);
    CHECK(names_in(d.a) == std::vector<std::string>{file_name_for("ab")});
    CHECK(read(d.a / file_name_for("ab")) == content);
}

TEST_CASE("bring_slot_file: without replace, a file of the target's name is never overwritten") {
    const dirs d;
    const auto content = state_file(50, 4096);
    write(d.a / file_name_for("ab"), content);
    const auto saved_since = state_file(60, 4096);  // what a save of the key wrote meanwhile
    write(d.b / file_name_for("ab"), saved_since);
    for (const bool link : {true, false}) {
        auto r = d.request(content.size(), link);
        r.replace = false;
        CHECK(bring_slot_file(r) == bring_result::failed);
        CHECK(read(d.b / file_name_for("ab")) == saved_since);
        CHECK(names_in(d.b) == std::vector<std::string>{file_name_for("ab")});  // no temporary
    }
    fs::remove(d.b / file_name_for("ab"));
    auto r = d.request(content.size(), false);
    r.replace = false;
    CHECK(bring_slot_file(r) == bring_result::copied);
    CHECK(read(d.b / file_name_for("ab")) == content);
}
