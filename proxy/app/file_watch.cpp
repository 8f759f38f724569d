#include "app/file_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace warmslot::app {
namespace {

// What a change of the watched file changes. Symlinks are followed: a ConfigMap swap changes
// the inode the name resolves to.
struct identity {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;

    bool operator==(const identity&) const = default;
};

namespace fs = std::filesystem;

identity identity_of(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    const auto ns = [](const timespec& t) {
        return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
    };
    return {true, st.st_dev, st.st_ino, st.st_size, ns(st.st_mtim), ns(st.st_ctim)};
}

// The directory and name under which events for `path` appear: the path as given and, when it
// is a symlink, the file it resolves to now.
std::vector<std::pair<std::string, std::string>> watch_points(const std::string& path) {
    const fs::path given = fs::absolute(path).lexically_normal();
    std::vector<std::pair<std::string, std::string>> out{
        {given.parent_path().string(), given.filename().string()}};
    std::error_code ec;
    const fs::path resolved = fs::canonical(given, ec);
    if (!ec && resolved != given)
        out.emplace_back(resolved.parent_path().string(), resolved.filename().string());
    return out;
}

constexpr std::uint32_t dir_events = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                     IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |
                                     IN_MOVE_SELF;

}  // namespace

// Owns the watcher thread, the inotify descriptor and the pipe that wakes the thread to stop.
struct file_watch::impl {
    std::string path;
    std::function<void()> on_change;
    file_watch_options options;
    mode active = mode::polling;
    int inotify_fd = -1;
    int stop_pipe[2] = {-1, -1};
    std::atomic<std::uint64_t> checks{0};
    std::thread thread;

    void start();
    void stop();
    bool wait_stop(std::chrono::milliseconds timeout);  // true when stop() was called
    void fire();
    void run_polling(identity last);
    void run_inotify(identity last);
};

file_watch::file_watch(std::string path, std::function<void()> on_change,
                       file_watch_options options)
    : impl_(std::make_unique<impl>()) {
    impl_->path = std::move(path);
    impl_->on_change = std::move(on_change);
    impl_->options = options;
    impl_->start();
}

file_watch::~file_watch() { stop(); }

void file_watch::stop() { impl_->stop(); }

file_watch::mode file_watch::active_mode() const noexcept { return impl_->active; }

std::uint64_t file_watch::checks() const noexcept { return impl_->checks.load(); }

void file_watch::impl::start() {
    if (::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        throw std::system_error(errno, std::generic_category(), "cannot create a pipe");
    if (!options.force_polling) {
        inotify_fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        const auto points = watch_points(path);
        // The file's own directory must be watchable; the directory a symlink leads to is a
        // bonus (it is watched again after every change).
        if (inotify_fd >= 0 &&
            ::inotify_add_watch(inotify_fd, points.front().first.c_str(), dir_events) < 0) {
            ::close(inotify_fd);
            inotify_fd = -1;
        }
        for (std::size_t i = 1; inotify_fd >= 0 && i < points.size(); ++i)
            ::inotify_add_watch(inotify_fd, points[i].first.c_str(), dir_events);
    }
    active = inotify_fd >= 0 ? mode::inotify : mode::polling;
    // Taken here, not on the thread: a change made right after construction must count.
    const identity first = identity_of(path);
    try {
        thread = std::thread(
            [this, first] { active == mode::inotify ? run_inotify(first) : run_polling(first); });
    } catch (...) {
        stop();
        throw;
    }
}

void file_watch::impl::stop() {
    if (thread.joinable()) {
        const char byte = 1;
        [[maybe_unused]] const ssize_t n = ::write(stop_pipe[1], &byte, 1);
        thread.join();
    }
    for (int* fd : {&inotify_fd, &stop_pipe[0], &stop_pipe[1]}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
    }
}

bool file_watch::impl::wait_stop(std::chrono::milliseconds timeout) {
    pollfd fd{stop_pipe[0], POLLIN, 0};
    int r = 0;
    do {
        r = ::poll(&fd, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    return r > 0;
}

void file_watch::impl::fire() {
    try {
        on_change();
    } catch (...) {
        // The watcher outlives one failed reload; the callback reports its own errors.
    }
}

void file_watch::impl::run_polling(identity last) {
    while (!wait_stop(options.poll_interval)) {
        const identity now = identity_of(path);
        if (now != last) {
            last = now;
            fire();
        }
        ++checks;
    }
}

void file_watch::impl::run_inotify(identity last) {
    auto points = watch_points(path);
    alignas(inotify_event) std::array<char, 16 * 1024> buffer{};
    bool pending = false;
    std::array<pollfd, 2> fds{{{stop_pipe[0], POLLIN, 0}, {inotify_fd, POLLIN, 0}}};
    for (;;) {
        // While a burst is pending, a quiet `debounce` ends it; otherwise wait for events.
        const int timeout = pending ? static_cast<int>(options.debounce.count()) : -1;
        const int r = ::poll(fds.data(), fds.size(), timeout);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (fds[0].revents & POLLIN) != 0) return;
        if (r == 0) {  // the burst is over
            pending = false;
            last = identity_of(path);
            points = watch_points(path);  // a symlink may point elsewhere now
            for (const auto& point : points)
                ::inotify_add_watch(inotify_fd, point.first.c_str(), dir_events);
            fire();
            ++checks;
            continue;
        }
        bool relevant = false;
        ssize_t n = 0;
        while ((n = ::read(inotify_fd, buffer.data(), buffer.size())) > 0) {
            for (ssize_t at = 0; at < n;) {
                const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + at);
                const std::string_view name =
                    event->len > 0 ? std::string_view(event->name) : std::string_view();
                for (const auto& point : points) relevant = relevant || name == point.second;
                if ((event->mask & (IN_Q_OVERFLOW | IN_IGNORED)) != 0) relevant = true;
                at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
            }
        }
        relevant = relevant || identity_of(path) != last;
        if (relevant)
            pending = true;
        else
            ++checks;
    }
}

}  // namespace warmslot::app
