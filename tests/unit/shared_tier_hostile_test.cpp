// The shared directory as another local user may shape it: links planted under the names
// warmslot writes or reads, FIFOs named like a manifest or a slot file, files larger than they
// say. Nothing planted there is followed, written through, or allowed to stall the thread.
// POSIX only (FIFOs, symbolic links, O_NOFOLLOW).
#ifndef _WIN32
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <string>

#include "cache/safe_file.hpp"
#include "cache/shared_tier.hpp"
#include "cache/slot_file.hpp"
#include "slot_file_fixtures.hpp"

using namespace warmslot::cache;
using namespace slot_file_fixtures;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct hostile_dirs {
    fs::path root =
        fs::temp_directory_path() / ("warmslot-hostile-" + std::to_string(std::random_device{}()));
    fs::path local = root / "local";
    fs::path shared = root / "shared";
    fs::path victim = root / "victim.txt";  // a file of the user warmslot runs as
    hostile_dirs() {
        fs::create_directories(local);
        fs::create_directories(shared);
        std::ofstream(victim) << "precious";
    }
    ~hostile_dirs() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
};

shared_entry entry(const std::string& key, std::uint64_t bytes) {
    shared_entry e;
    e.key = key;
    e.identity = "model-x build-1 slots-4";
    e.tokens = 10;
    e.bytes = bytes;
    e.prefill_seconds = 1.0;
    e.created = e.last_used = 1000;
    return e;
}

auto later() { return std::chrono::steady_clock::now() + 30s; }

std::string content(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `f` on another thread and waits at most 5 s. A call stuck in an open() of `fifo` is
// released by opening its other end, so a failing test ends instead of hanging.
template <class F>
bool returns_promptly(F f, const fs::path& fifo) {
    auto done = std::async(std::launch::async, f);
    if (done.wait_for(5s) == std::future_status::ready) return true;
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    const int r = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    done.wait();
    if (w >= 0) ::close(w);
    if (r >= 0) ::close(r);
    return false;
}

}  // namespace

TEST_CASE("shared tier: a FIFO named like a manifest or slot file never stalls the thread") {
    hostile_dirs d;
    const auto manifest_fifo = d.shared / manifest_name_for("0badf1f0");
    REQUIRE(::mkfifo(manifest_fifo.c_str(), 0600) == 0);
    CHECK(returns_promptly([&] { return find_shared(d.shared, "0badf1f0", "x").has_value(); },
                           manifest_fifo));
    CHECK_FALSE(find_shared(d.shared, "0badf1f0", "x"));
    CHECK(returns_promptly([&] { return read_regular(manifest_fifo, 4096).has_value(); },
                           manifest_fifo));

    // A slot file replaced by a FIFO after its manifest was read: the fetch is a miss.
    const auto bytes = state_file(10, 100);
    const auto e = entry("0badf1f1", bytes.size());
    const auto bin_fifo = d.shared / file_name_for(e.key);
    REQUIRE(::mkfifo(bin_fifo.c_str(), 0600) == 0);
    bring_result got = bring_result::copied;
    CHECK(returns_promptly(
        [&] {
            got = fetch_shared(d.shared, e, d.local / file_name_for(e.key), later(), 2000, "h2-1");
            return 0;
        },
        bin_fifo));
    CHECK(got == bring_result::missing);
    CHECK(returns_promptly([&] { return check_slot_file(bin_fifo, bytes.size()); }, bin_fifo));
    // The sweep lists it, and neither reads nor counts it.
    const auto sweep = enforce_shared_budget(d.shared, 1 << 20, "h1-1", 3600s);
    CHECK(sweep.ran);
    CHECK(sweep.bytes == 0);
}

TEST_CASE("shared tier: links are not followed, for reading or writing") {
    hostile_dirs d;
    // A manifest elsewhere, linked in under a manifest's name, with its slot file beside it.
    const auto bytes = state_file(10, 100);
    const auto e = entry("11aa22bb", bytes.size());
    write(d.shared / file_name_for(e.key), bytes);
    const auto elsewhere = d.root / "manifest-elsewhere.json";
    std::ofstream(elsewhere) << manifest_text(e);
    fs::create_symlink(elsewhere, d.shared / manifest_name_for(e.key));
    CHECK_FALSE(find_shared(d.shared, e.key, e.identity));
    CHECK_FALSE(read_regular(d.shared / manifest_name_for(e.key), 4096));
    // A slot file linked in: not read.
    const auto linked = d.root / "slot-elsewhere.bin";
    write(linked, bytes);
    const auto link = d.shared / file_name_for("11aa22bc");
    fs::create_symlink(linked, link);
    CHECK(check_slot_file(link, bytes.size()) == file_state::damaged);

    // write_new never writes through a link, nor over an existing file.
    const auto planted = d.shared / "planted.tmp";
    fs::create_symlink(d.victim, planted);
    CHECK_FALSE(write_new(planted, "attacker-controlled"));
    CHECK(content(d.victim) == "precious");
    CHECK_FALSE(write_new(d.victim, "x"));
    CHECK(content(d.victim) == "precious");
    CHECK(write_new(d.shared / "fresh.tmp", "new"));
    CHECK(content(d.shared / "fresh.tmp") == "new");
}

TEST_CASE(
    "shared tier: temporary names are random; links planted under guessed ones change nothing") {
    hostile_dirs d;
    // Links under every name the old counters would have used, for both kinds of temporary.
    const std::string key = "33cc44dd";
    for (int n = 0; n < 64; ++n) {
        for (const auto& name : {"ws-" + key + "-h1-1-" + std::to_string(n) + ".json.tmp",
                                 "ws-" + key + "-h1-1-" + std::to_string(n) + ".bin.tmp"})
            fs::create_symlink(d.victim, d.shared / name);
    }
    const auto bytes = state_file(10, 100);
    write(d.local / file_name_for(key), bytes);
    const auto e = entry(key, bytes.size());
    for (int i = 0; i < 3; ++i) {  // publish, then rewrite the manifest by fetches
        if (i == 0) {
            REQUIRE(publish_shared(d.shared, e, d.local / file_name_for(key), 1 << 20, later(),
                                   "h1-1") == publish_result::published);
        } else {
            fs::remove(d.local / file_name_for(key));
            REQUIRE(fetch_shared(d.shared, e, d.local / file_name_for(key), later(), 2000 + i,
                                 "h1-1") == bring_result::copied);
        }
    }
    CHECK(content(d.victim) == "precious");
    CHECK(fs::is_regular_file(fs::symlink_status(d.shared / manifest_name_for(key))));
    CHECK(fs::is_regular_file(fs::symlink_status(d.shared / file_name_for(key))));
    std::set<std::string> parts;
    for (int i = 0; i < 100; ++i) parts.insert(random_name_part());
    CHECK(parts.size() == 100);
    CHECK(random_name_part().size() == 16);
}

TEST_CASE("shared tier: reads are bounded by what the caller expects") {
    hostile_dirs d;
    const auto big = d.shared / "big";
    std::ofstream(big) << std::string(5000, 'x');
    CHECK_FALSE(read_regular(big, 4096));
    CHECK(read_regular(big, 5000)->size() == 5000);
    // A slot file longer than its manifest says is not copied.
    const auto bytes = state_file(10, 100);
    const auto e = entry("55ee66ff", bytes.size() - 1);
    write(d.shared / file_name_for(e.key), bytes);
    bool late = false;
    CHECK_FALSE(
        copy_regular(d.shared / file_name_for(e.key), d.local / "copy", e.bytes, later(), late));
    CHECK_FALSE(late);
}
#endif
