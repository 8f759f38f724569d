// The shared tier's directory: manifests read back and refused, publish and fetch of a slot
// file with what they leave on disk, the eviction order, and eviction with two warmslots (the
// lock, the claim) and with what a crash left behind.
#include "cache/shared_tier.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/index.hpp"
#include "slot_file_fixtures.hpp"

using namespace warmslot::cache;
using namespace slot_file_fixtures;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary) << s;
}

struct dirs {
    fs::path root =
        fs::temp_directory_path() / ("warmslot-shared-" + std::to_string(std::random_device{}()));
    fs::path local = root / "local";    // a slot directory
    fs::path shared = root / "shared";  // the shared tier
    fs::path other = root / "other";    // another host's slot directory
    dirs() {
        fs::create_directories(local);
        fs::create_directories(shared);
        fs::create_directories(other);
    }
    ~dirs() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
};

shared_entry entry(const std::string& key, std::uint64_t bytes, double seconds = 1.0) {
    shared_entry e;
    e.key = key;
    e.identity = "model-x build-1 slots-4";
    e.tokens = 10;
    e.bytes = bytes;
    e.prefill_seconds = seconds;
    e.created = e.last_used = 1000;
    e.publisher = "host-a/gpu0";
    return e;
}

auto later() { return std::chrono::steady_clock::now() + std::chrono::seconds(30); }

// A file published from `d.local` under `key`; returns its entry.
shared_entry publish(const dirs& d, const std::string& key, std::size_t state = 100,
                     double seconds = 1.0, std::uint64_t budget = 1 << 20) {
    const auto bytes = state_file(10, state);
    write(d.local / file_name_for(key), bytes);
    auto e = entry(key, bytes.size(), seconds);
    REQUIRE(publish_shared(d.shared, e, d.local / file_name_for(key), budget, later(), "h1-1") ==
            publish_result::published);
    return e;
}

}  // namespace

TEST_CASE("shared tier: a manifest reads back; malformed, oversized or hostile ones are refused") {
    const auto e = entry("0123abcd", 4096);
    const auto back = parse_manifest(manifest_text(e));
    REQUIRE(back);
    CHECK(back->key == e.key);
    CHECK(back->identity == e.identity);
    CHECK(back->tokens == 10);
    CHECK(back->bytes == 4096);
    CHECK(back->prefill_seconds == doctest::Approx(1.0));
    CHECK(back->publisher == "host-a/gpu0");
    CHECK(manifest_name_for("0123abcd") == "ws-0123abcd.json");

    CHECK_FALSE(parse_manifest("not json"));
    CHECK_FALSE(parse_manifest("[1,2]"));
    CHECK_FALSE(parse_manifest(R"({"key":"ab","identity":"x","tokens":1})"));  // no bytes
    CHECK_FALSE(parse_manifest(R"({"key":"ab","identity":"x","tokens":"1","bytes":2})"));
    CHECK_FALSE(parse_manifest(R"({"key":"../etc","identity":"x","tokens":1,"bytes":2})"));
    CHECK_FALSE(parse_manifest(R"({"key":"ab","identity":"","tokens":1,"bytes":2})"));
    CHECK_FALSE(parse_manifest(R"({"key":"ab","identity":"x","tokens":0,"bytes":2})"));
    CHECK_FALSE(
        parse_manifest(R"({"key":"ab","identity":"x","tokens":1,"bytes":2,"prefill_seconds":-1})"));
    auto big = entry("ab", 2);
    big.publisher = std::string(max_manifest_bytes, 'p');
    CHECK_FALSE(parse_manifest(manifest_text(big)));
}

TEST_CASE("shared tier: publish copies a file and its manifest; a fetch copies it elsewhere") {
    dirs d;
    const auto e = publish(d, "00aa");
    CHECK(files_in(d.shared) == std::vector<std::string>{"ws-00aa.bin", "ws-00aa.json"});
    CHECK(read(d.shared / "ws-00aa.bin") == read(d.local / "ws-00aa.bin"));
    // A copy, never a link: the local file replaced by a new save leaves the shared one alone.
    CHECK_FALSE(fs::equivalent(d.shared / "ws-00aa.bin", d.local / "ws-00aa.bin"));

    // Published again: left as it is.
    CHECK(publish_shared(d.shared, e, d.local / "ws-00aa.bin", 1 << 20, later(), "h1-1") ==
          publish_result::present);

    const auto found = find_shared(d.shared, "00aa", e.identity);
    REQUIRE(found);
    CHECK(found->tokens == 10);
    CHECK_FALSE(find_shared(d.shared, "00aa", "another model"));
    CHECK_FALSE(find_shared(d.shared, "00bb", e.identity));
    CHECK_FALSE(find_shared(d.shared, "../x", e.identity));

    CHECK(fetch_shared(d.shared, *found, d.other / "ws-00aa.bin", later(), 2000, "h2-1") ==
          bring_result::copied);
    CHECK(read(d.other / "ws-00aa.bin") == read(d.local / "ws-00aa.bin"));
    CHECK(files_in(d.other) == std::vector<std::string>{"ws-00aa.bin"});
    // The use is recorded in the manifest.
    const auto used = find_shared(d.shared, "00aa", e.identity);
    REQUIRE(used);
    CHECK(used->hits == 1);
    CHECK(used->last_used == 2000);
    CHECK(files_in(d.shared) == std::vector<std::string>{"ws-00aa.bin", "ws-00aa.json"});
}

TEST_CASE(
    "shared tier: a manifest names its tenant; a lookup for a tenant finds only its entries") {
    dirs d;
    const auto bytes = state_file(10, 100);
    write(d.local / "ws-00aa.bin", bytes);
    auto e = entry("00aa", bytes.size());
    e.tenant = "team-a";
    REQUIRE(publish_shared(d.shared, e, d.local / "ws-00aa.bin", 1 << 20, later(), "h1-1") ==
            publish_result::published);
    const std::string a = "team-a", b = "team-b", none;
    REQUIRE(find_shared(d.shared, "00aa", e.identity, &a));
    CHECK(find_shared(d.shared, "00aa", e.identity, &a)->tenant == "team-a");
    CHECK_FALSE(find_shared(d.shared, "00aa", e.identity, &b));
    CHECK_FALSE(find_shared(d.shared, "00aa", e.identity, &none));
    CHECK(find_shared(d.shared, "00aa", e.identity));  // no tenant asked: any tenant's
    // A manifest written before tenants is the default tenant's.
    const auto old = parse_manifest(R"({"key":"ab","identity":"x","tokens":1,"bytes":2})");
    REQUIRE(old);
    CHECK(old->tenant.empty());
}

TEST_CASE("shared tier: what is not published, and what is not found") {
    dirs d;
    const auto bytes = state_file(10, 100);
    write(d.local / "ws-00aa.bin", bytes);
    const auto e = entry("00aa", bytes.size());
    CHECK(publish_shared(d.shared, e, d.local / "ws-00aa.bin", bytes.size() - 1, later(), "t") ==
          publish_result::too_big);
    CHECK(publish_shared(d.shared, e, d.local / "ws-gone.bin", 1 << 20, later(), "t") ==
          publish_result::missing);
    auto wrong = e;
    wrong.bytes += 1;  // the local file is not what its row says
    CHECK(publish_shared(d.shared, wrong, d.local / "ws-00aa.bin", 1 << 20, later(), "t") ==
          publish_result::missing);
    CHECK(files_in(d.shared).empty());

    // A manifest whose file is gone or cut short is no entry.
    publish(d, "00aa");
    fs::resize_file(d.shared / "ws-00aa.bin", 20);
    CHECK_FALSE(find_shared(d.shared, "00aa", e.identity));
    fs::remove(d.shared / "ws-00aa.bin");
    CHECK_FALSE(find_shared(d.shared, "00aa", e.identity));
    // A shared directory that is not there: nothing found, nothing published.
    CHECK_FALSE(find_shared(d.root / "absent", "00aa", e.identity));
    CHECK(publish_shared(d.root / "absent", e, d.local / "ws-00aa.bin", 1 << 20, later(), "t") ==
          publish_result::failed);
}

TEST_CASE("shared tier: a fetch whose file changed under it is a miss and leaves nothing") {
    dirs d;
    const auto e = publish(d, "00aa");
    write(d.shared / "ws-00aa.bin", state_file(3, 5));  // replaced with another size
    CHECK(fetch_shared(d.shared, e, d.other / "ws-00aa.bin", later(), 2000, "h2") ==
          bring_result::missing);
    CHECK(files_in(d.other).empty());
    // Past the deadline: nothing left behind either.
    const auto f = publish(d, "00bb");
    CHECK(fetch_shared(d.shared, f, d.other / "ws-00bb.bin",
                       std::chrono::steady_clock::now() - std::chrono::seconds(1), 2000,
                       "h2") == bring_result::too_slow);
    CHECK(files_in(d.other).empty());
}

TEST_CASE("shared tier: eviction order is value per byte, then least recently used") {
    std::vector<shared_entry> es = {entry("01", 100, 1.0), entry("02", 100, 5.0),
                                    entry("03", 100, 1.0), entry("04", 200, 1.0)};
    es[2].last_used = 500;  // older than 01
    es[0].hits = 0;
    // 04: 1 s for 200 bytes is the least value per byte; then 03 (older) before 01.
    CHECK(shared_evictions(es, 400) == std::vector<std::string>{"04"});
    CHECK(shared_evictions(es, 200) == std::vector<std::string>{"04", "03"});
    es[2].hits = 9;  // now worth more per byte than 02: 01 and 02 go before it
    CHECK(shared_evictions(es, 100) == std::vector<std::string>{"04", "01", "02"});
    CHECK(shared_evictions(es, 500).empty());
}

TEST_CASE("shared tier: enforcing the budget evicts entries whole, once, under one lock") {
    dirs d;
    const auto cheap = publish(d, "00aa", 100, 0.5);
    const auto dear = publish(d, "00bb", 100, 10.0);
    const auto sweep = enforce_shared_budget(d.shared, dear.bytes, "h1", std::chrono::hours(1));
    CHECK(sweep.ran);
    CHECK(sweep.bytes == cheap.bytes + dear.bytes);
    CHECK(sweep.evicted == std::vector<std::string>{"00aa"});
    CHECK(files_in(d.shared) == std::vector<std::string>{"ws-00bb.bin", "ws-00bb.json"});

    // Another warmslot holds the lock: nothing is done.
    fs::create_directory(d.shared / ".warmslot-evict.lock");
    const auto held = enforce_shared_budget(d.shared, 0, "h2", std::chrono::hours(1));
    CHECK_FALSE(held.ran);
    CHECK(find_shared(d.shared, "00bb", dear.identity));
    // A lock older than `stale` is taken over (its holder died).
    const auto taken = enforce_shared_budget(d.shared, 0, "h2", std::chrono::seconds(-1));
    CHECK(taken.ran);
    CHECK(taken.evicted == std::vector<std::string>{"00bb"});
    CHECK(files_in(d.shared).empty());
}

TEST_CASE("shared tier: an entry another evictor claimed is not evicted twice") {
    dirs d;
    publish(d, "00aa");
    // Another evictor renamed the manifest away (its claim) and has not deleted the file yet.
    fs::rename(d.shared / "ws-00aa.json", d.shared / ".ws-00aa-h9-0.evict");
    CHECK_FALSE(find_shared(d.shared, "00aa", entry("00aa", 1).identity));
    const auto sweep = enforce_shared_budget(d.shared, 0, "h1", std::chrono::hours(1));
    CHECK(sweep.ran);
    CHECK(sweep.evicted.empty());
    CHECK(sweep.bytes == 0);
    // Young leftovers stay (their writer may still be at work) ...
    CHECK(files_in(d.shared) == std::vector<std::string>{".ws-00aa-h9-0.evict", "ws-00aa.bin"});
    // ... old ones go: the claim, the file without manifest, a temporary, a stray manifest.
    write_text(d.shared / "ws-00cc-h3-7.bin.tmp", "partial");
    write_text(d.shared / "ws-00dd.json", manifest_text(entry("00dd", 5)));
    const auto old = enforce_shared_budget(d.shared, 1 << 20, "h1", std::chrono::seconds(-1));
    CHECK(old.cleaned == 4);
    CHECK(files_in(d.shared).empty());
}
