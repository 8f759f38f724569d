// Watches one file (the config) and reports when its content may have changed. Platform seam,
// no Asio: inotify on Linux with a polling fallback; polling only on Windows
// (file_watch_windows.cpp).
//
// inotify watches the file's DIRECTORY, not the file: editors save by writing a new file and
// renaming it over the old one, and Kubernetes ConfigMaps swap a `..data` symlink, so a watch on
// the file itself would go silent after the first save. Events are filtered by file name, and any
// other event in the directory still counts when the file's identity (device, inode, size,
// mtime, ctime; symlinks followed) changed. A burst of events becomes one callback after
// `debounce` of quiet. Polling compares the same identity every `poll_interval`.
//
// The callback runs on the watcher's own thread, one call at a time; it should hand the work
// off (e.g. post to an executor) and must not call stop(). The callback may fire for a change
// that turns out to be none (a touch, an identical rewrite): reloading must be idempotent.
// stop() and the destructor are thread-safe with respect to the watcher thread and join it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace warmslot::app {

struct file_watch_options {
    std::chrono::milliseconds debounce{100};        // quiet time that ends a burst of events
    std::chrono::milliseconds poll_interval{1000};  // polling mode: how often to look
    bool force_polling = false;                     // skip inotify (network filesystems, tests)
};

class file_watch {
  public:
    enum class mode { inotify, polling };

    // Starts watching at once. Falls back to polling when inotify is unavailable (or the
    // directory cannot be watched). Throws std::system_error when no thread or pipe can be made.
    file_watch(std::string path, std::function<void()> on_change, file_watch_options options = {});
    ~file_watch();
    file_watch(const file_watch&) = delete;
    file_watch& operator=(const file_watch&) = delete;

    // Stops the watcher thread and waits for it (and a running callback) to finish. Idempotent.
    void stop();

    mode active_mode() const noexcept;

    // How many times the watcher has finished looking at the file (a poll, or a batch of
    // directory events including the callback it led to). Lets callers and tests know that a
    // change would have been reported by now.
    std::uint64_t checks() const noexcept;

    struct impl;  // the platform's watcher (file_watch.cpp)

  private:
    std::unique_ptr<impl> impl_;
};

}  // namespace warmslot::app
