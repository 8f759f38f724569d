// Windows implementation of file_watch.hpp: polling only. The file's existence, size and last
// write time are compared every `poll_interval`; a change is reported `debounce` after it was
// first seen, so that a save in several writes becomes one reload.
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "app/file_watch.hpp"

namespace warmslot::app {
namespace {

namespace fs = std::filesystem;

struct identity {
    bool exists = false;
    std::uintmax_t size = 0;
    fs::file_time_type mtime{};

    bool operator==(const identity&) const = default;
};

identity identity_of(const std::string& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return {};
    const auto mtime = fs::last_write_time(path, ec);
    if (ec) return {};
    return {true, size, mtime};
}

}  // namespace

struct file_watch::impl {
    std::string path;
    std::function<void()> on_change;
    file_watch_options options;
    std::atomic<std::uint64_t> checks{0};
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;  // under mu
    std::thread thread;

    // true when stop() was called
    bool wait_stop(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, timeout, [this] { return stopping; });
    }

    void run(identity last) {
        while (!wait_stop(options.poll_interval)) {
            if (identity_of(path) != last) {
                if (wait_stop(options.debounce)) return;
                last = identity_of(path);
                try {
                    on_change();
                } catch (...) {
                    // The watcher outlives one failed reload; the callback reports its errors.
                }
            }
            ++checks;
        }
    }
};

file_watch::file_watch(std::string path, std::function<void()> on_change,
                       file_watch_options options)
    : impl_(std::make_unique<impl>()) {
    impl_->path = std::move(path);
    impl_->on_change = std::move(on_change);
    impl_->options = options;
    const identity first = identity_of(impl_->path);
    impl_->thread = std::thread([this, first] { impl_->run(first); });
}

file_watch::~file_watch() { stop(); }

void file_watch::stop() {
    {
        std::lock_guard lock(impl_->mu);
        impl_->stopping = true;
    }
    impl_->cv.notify_all();
    if (impl_->thread.joinable()) impl_->thread.join();
}

file_watch::mode file_watch::active_mode() const noexcept { return mode::polling; }

std::uint64_t file_watch::checks() const noexcept { return impl_->checks.load(); }

}  // namespace warmslot::app
