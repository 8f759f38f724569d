#include "app/file_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace warmslot::app {

// What a change of the watched file changes. Symlinks are followed: a ConfigMap swap changes
// the inode the name resolves to.
struct file_watch::identity {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;

    bool operator==(const identity&) const = default;
};

namespace {

using identity = file_watch::identity;

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

file_watch::file_watch(std::string path, std::function<void()> on_change,
                       file_watch_options options)
    : path_(std::move(path)), on_change_(std::move(on_change)), options_(options) {
    if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
        throw std::system_error(errno, std::generic_category(), "cannot create a pipe");
    if (!options_.force_polling) {
        inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (inotify_fd_ >= 0 &&
            ::inotify_add_watch(inotify_fd_, watch_points(path_).front().first.c_str(),
                                dir_events) < 0) {
            ::close(inotify_fd_);
            inotify_fd_ = -1;
        }
    }
    mode_ = inotify_fd_ >= 0 ? mode::inotify : mode::polling;
    // Taken here, not on the thread: a change made right after construction must count.
    auto start = std::make_shared<identity>(identity_of(path_));
    try {
        thread_ = std::thread(
            [this, start] { mode_ == mode::inotify ? run_inotify(*start) : run_polling(*start); });
    } catch (...) {
        stop();
        throw;
    }
}

file_watch::~file_watch() { stop(); }

void file_watch::stop() {
    if (thread_.joinable()) {
        const char byte = 1;
        [[maybe_unused]] const ssize_t n = ::write(stop_pipe_[1], &byte, 1);
        thread_.join();
    }
    for (int* fd : {&inotify_fd_, &stop_pipe_[0], &stop_pipe_[1]}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
    }
}

bool file_watch::wait_stop(std::chrono::milliseconds timeout) {
    pollfd fd{stop_pipe_[0], POLLIN, 0};
    int r = 0;
    do {
        r = ::poll(&fd, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    return r > 0;
}

void file_watch::fire() {
    try {
        on_change_();
    } catch (...) {
        // The watcher outlives one failed reload; the callback reports its own errors.
    }
}

void file_watch::run_polling(identity last) {
    while (!wait_stop(options_.poll_interval)) {
        const identity now = identity_of(path_);
        if (now != last) {
            last = now;
            fire();
        }
        ++checks_;
    }
}

void file_watch::run_inotify(identity last) {
    auto points = watch_points(path_);
    alignas(inotify_event) std::array<char, 16 * 1024> buffer{};
    bool pending = false;
    std::array<pollfd, 2> fds{{{stop_pipe_[0], POLLIN, 0}, {inotify_fd_, POLLIN, 0}}};
    for (;;) {
        // While a burst is pending, a quiet `debounce` ends it; otherwise wait for events.
        const int timeout = pending ? static_cast<int>(options_.debounce.count()) : -1;
        const int r = ::poll(fds.data(), fds.size(), timeout);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 || (fds[0].revents & POLLIN) != 0) return;
        if (r == 0) {  // the burst is over
            pending = false;
            last = identity_of(path_);
            points = watch_points(path_);  // a symlink may point elsewhere now
            for (const auto& point : points)
                ::inotify_add_watch(inotify_fd_, point.first.c_str(), dir_events);
            fire();
            ++checks_;
            continue;
        }
        bool relevant = false;
        ssize_t n = 0;
        while ((n = ::read(inotify_fd_, buffer.data(), buffer.size())) > 0) {
            for (ssize_t at = 0; at < n;) {
                const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + at);
                const std::string_view name =
                    event->len > 0 ? std::string_view(event->name) : std::string_view();
                for (const auto& point : points) relevant = relevant || name == point.second;
                if ((event->mask & (IN_Q_OVERFLOW | IN_IGNORED)) != 0) relevant = true;
                at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
            }
        }
        relevant = relevant || identity_of(path_) != last;
        if (relevant)
            pending = true;
        else
            ++checks_;
    }
}

}  // namespace warmslot::app
