#include "app/file_watch.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"

using namespace std::chrono_literals;
using warmslot::app::file_watch;
using warmslot::app::file_watch_options;
using warmslot::test::temp_dir;
using warmslot::test::wait_until;

namespace {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// The watcher has looked at the file at least twice since `before`: anything written before
// this call has been seen (and reported, if it counted).
bool settled(const file_watch& w, std::uint64_t before) {
    return wait_until([&] { return w.checks() >= before + 2; }, 10s);
}

struct fixture {
    temp_dir dir{"watch"};
    std::string path = dir.file("warmslot.yaml");
    std::atomic<int> calls{0};

    std::unique_ptr<file_watch> watch(bool polling, std::chrono::milliseconds debounce = 30ms) {
        file_watch_options options;
        options.force_polling = polling;
        options.poll_interval = 20ms;
        options.debounce = debounce;
        return std::make_unique<file_watch>(
            path, [this] { ++calls; }, options);
    }
    bool called(int n) {
        return wait_until([&] { return calls.load() >= n; }, 10s);
    }
};

void check_mode(bool polling) {
    fixture f;
    write_file(f.path, "a: 1\n");
    auto w = f.watch(polling);
    CHECK((w->active_mode() == file_watch::mode::polling) == polling);

    SUBCASE("a write in place is reported") {
        write_file(f.path, "a: 2\n");
        CHECK(f.called(1));
    }
    SUBCASE("a replacement by rename is reported, and so is the next one") {
        const std::string tmp = f.dir.file(".warmslot.yaml.swp");
        write_file(tmp, "a: 3\n");
        std::filesystem::rename(tmp, f.path);
        CHECK(f.called(1));
        const int after_first = f.calls.load();
        write_file(tmp, "a: 4, b: 5\n");
        std::filesystem::rename(tmp, f.path);
        CHECK(f.called(after_first + 1));
    }
    SUBCASE("other files in the directory are not reported") {
        // In inotify mode a lone check only happens on events; make one that is ignored.
        const std::uint64_t before = w->checks();
        write_file(f.dir.file("other.yaml"), "x");
        write_file(f.dir.file("other.yaml"), "xy");
        if (polling) {
            CHECK(settled(*w, before));
        } else {
            CHECK(wait_until([&] { return w->checks() > before; }, 10s));
        }
        CHECK(f.calls.load() == 0);
    }
    SUBCASE("a ConfigMap-style symlink swap is reported") {
        const auto& d = f.dir.path();
        std::filesystem::create_directory(d / "ts1");
        std::filesystem::create_directory(d / "ts2");
        write_file((d / "ts1" / "cm.yaml").string(), "v: 1\n");
        write_file((d / "ts2" / "cm.yaml").string(), "v: 2\n");
        std::filesystem::create_directory_symlink("ts1", d / "..data");
        std::filesystem::create_symlink("..data/cm.yaml", d / "cm.yaml");
        f.path = (d / "cm.yaml").string();
        w = f.watch(polling);
        std::filesystem::create_directory_symlink("ts2", d / "..data_tmp");
        std::filesystem::rename(d / "..data_tmp", d / "..data");
        CHECK(f.called(1));
    }
    SUBCASE("a symlink to a file in another directory follows that file") {
        const temp_dir elsewhere("watch_target");
        const std::string target = elsewhere.file("real.yaml");
        write_file(target, "r: 1\n");
        f.path = f.dir.file("link.yaml");
        std::filesystem::create_symlink(target, f.path);
        w = f.watch(polling);
        write_file(target, "r: 22\n");
        CHECK(f.called(1));
    }
    SUBCASE("a deleted and recreated file is reported") {
        std::filesystem::remove(f.path);
        CHECK(f.called(1));
        const int after_delete = f.calls.load();
        write_file(f.path, "a: 6\n");
        CHECK(f.called(after_delete + 1));
    }
    w->stop();
    w->stop();  // idempotent
}

}  // namespace

TEST_CASE("file_watch: inotify mode") { check_mode(false); }

TEST_CASE("file_watch: polling mode") { check_mode(true); }

TEST_CASE("file_watch: a burst of writes becomes few callbacks") {
    fixture f;
    write_file(f.path, "a: 0\n");
    // A quiet time far above the gap between two writes, even on a loaded machine (with 30 ms,
    // a busy host spread the 20 writes over 7 callbacks).
    auto w = f.watch(false, 1000ms);
    for (int i = 1; i <= 20; ++i) write_file(f.path, "a: " + std::to_string(i) + "\n");
    CHECK(f.called(1));
    const std::uint64_t before = w->checks();
    write_file(f.dir.file("unrelated"), "x");  // a later, ignored event marks the end
    CHECK(wait_until([&] { return w->checks() > before; }, 10s));
    CHECK(f.calls.load() < 5);
}

TEST_CASE("file_watch: stop joins promptly and the destructor stops") {
    fixture f;
    write_file(f.path, "a: 1\n");
    file_watch_options slow;
    slow.force_polling = true;
    slow.poll_interval = 1h;
    const auto started = std::chrono::steady_clock::now();
    {
        file_watch w(
            f.path, [] {}, slow);
        w.stop();
    }
    {
        file_watch w(f.path, [] {});
    }
    CHECK(std::chrono::steady_clock::now() - started < 5s);
}

TEST_CASE("file_watch: a missing directory falls back to polling") {
    fixture f;
    int calls = 0;
    file_watch w(f.dir.file("not-yet/warmslot.yaml"), [&] { ++calls; });
    CHECK(w.active_mode() == file_watch::mode::polling);
}
