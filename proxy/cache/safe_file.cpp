#include "cache/safe_file.hpp"

#include <cstdio>
#include <random>
#include <system_error>
#include <utility>
#include <vector>

#ifdef _WIN32
#include <fstream>
#else
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace warmslot::cache {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t chunk_bytes = 1 << 20;  // one read and write of a copy

#ifndef _WIN32

// A descriptor closed on every path out.
class descriptor {
  public:
    explicit descriptor(int fd) : fd_(fd) {}
    descriptor(descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    ~descriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    descriptor(const descriptor&) = delete;
    descriptor& operator=(const descriptor&) = delete;
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }

  private:
    int fd_;
};

// Opens an existing file for reading: never through a link at the last component, and without
// waiting for a writer (O_NONBLOCK: a FIFO opens at once), then keeps it only when the
// descriptor is a regular file. `size` is its size then.
descriptor open_regular(const fs::path& file, std::uint64_t& size) {
    descriptor fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) return fd;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return descriptor(-1);
    size = static_cast<std::uint64_t>(st.st_size);
    return fd;
}

descriptor create_new(const fs::path& file) {
    return descriptor(
        ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
}

// Reads up to `n` bytes; the count read (0 at the end), or -1 on an error.
long read_some(int fd, char* buf, std::size_t n) {
    for (;;) {
        const auto got = ::read(fd, buf, n);
        if (got >= 0 || errno != EINTR) return static_cast<long>(got);
    }
}

bool write_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
        const auto put = ::write(fd, data, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return false;
        data += put;
        n -= static_cast<std::size_t>(put);
    }
    return true;
}

// Reads until `out` holds `limit` bytes or the file ends. False on an error.
bool read_up_to(int fd, std::string& out, std::size_t limit) {
    out.resize(limit);
    std::size_t have = 0;
    while (have < limit) {
        const auto got = read_some(fd, out.data() + have, limit - have);
        if (got < 0) return false;
        if (got == 0) break;
        have += static_cast<std::size_t>(got);
    }
    out.resize(have);
    return true;
}

#endif

}  // namespace

std::string random_name_part() {
    std::random_device rd;
    const auto high = static_cast<std::uint64_t>(rd());
    const auto low = static_cast<std::uint64_t>(rd());
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>((high << 32) ^ low));
    return out;
}

#ifndef _WIN32

std::optional<std::string> read_regular(const fs::path& file, std::size_t max_bytes) {
    std::uint64_t size = 0;
    const auto fd = open_regular(file, size);
    if (!fd || size > max_bytes) return std::nullopt;
    std::string text;
    // One byte over the limit tells a file that grew since fstat.
    if (!read_up_to(fd.get(), text, max_bytes + 1) || text.size() > max_bytes) return std::nullopt;
    return text;
}

std::optional<file_head> read_head(const fs::path& file, std::size_t n) {
    file_head out;
    const auto fd = open_regular(file, out.size);
    if (!fd || out.size < n) return std::nullopt;
    if (!read_up_to(fd.get(), out.bytes, n) || out.bytes.size() != n) return std::nullopt;
    return out;
}

bool write_new(const fs::path& file, std::string_view text) {
    const auto fd = create_new(file);
    if (!fd) return false;
    if (write_all(fd.get(), text.data(), text.size())) return true;
    std::error_code ec;
    fs::remove(file, ec);
    return false;
}

bool copy_regular(const fs::path& from, const fs::path& to, std::uint64_t bytes,
                  std::chrono::steady_clock::time_point deadline, bool& late) {
    std::uint64_t size = 0;
    const auto in = open_regular(from, size);
    if (!in || size != bytes) return false;
    const auto out = create_new(to);
    if (!out) return false;
    std::vector<char> buf(chunk_bytes);
    std::uint64_t copied = 0;
    for (;;) {
        if (std::chrono::steady_clock::now() >= deadline) {
            late = true;
            return false;
        }
        const auto got = read_some(in.get(), buf.data(), buf.size());
        if (got < 0) return false;
        if (got == 0) break;
        copied += static_cast<std::uint64_t>(got);
        if (copied > bytes || !write_all(out.get(), buf.data(), static_cast<std::size_t>(got)))
            return false;
    }
    return copied == bytes;
}

#else  // Windows: no FIFOs to stall on and no O_NOFOLLOW; regular files only all the same.

namespace {

bool regular(const fs::path& file, std::uint64_t& size) {
    std::error_code ec;
    const auto st = fs::symlink_status(file, ec);
    if (ec || st.type() != fs::file_type::regular) return false;
    size = fs::file_size(file, ec);
    return !ec;
}

}  // namespace

std::optional<std::string> read_regular(const fs::path& file, std::size_t max_bytes) {
    std::uint64_t size = 0;
    if (!regular(file, size) || size > max_bytes) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    std::string text(max_bytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) return std::nullopt;
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_bytes) return std::nullopt;
    return text;
}

std::optional<file_head> read_head(const fs::path& file, std::size_t n) {
    file_head out;
    if (!regular(file, out.size) || out.size < n) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    out.bytes.resize(n);
    if (!in.read(out.bytes.data(), static_cast<std::streamsize>(n))) return std::nullopt;
    return out;
}

bool write_new(const fs::path& file, std::string_view text) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(file, ec))) return false;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out.fail()) return true;
    fs::remove(file, ec);
    return false;
}

bool copy_regular(const fs::path& from, const fs::path& to, std::uint64_t bytes,
                  std::chrono::steady_clock::time_point deadline, bool& late) {
    std::uint64_t size = 0;
    std::error_code ec;
    if (!regular(from, size) || size != bytes || fs::exists(fs::symlink_status(to, ec)))
        return false;
    std::ifstream in(from, std::ios::binary);
    std::ofstream out(to, std::ios::binary | std::ios::trunc);
    if (!in || !out) return false;
    std::vector<char> buf(chunk_bytes);
    std::uint64_t copied = 0;
    while (in) {
        if (std::chrono::steady_clock::now() >= deadline) {
            late = true;
            return false;
        }
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto got = in.gcount();
        if (got <= 0) break;
        copied += static_cast<std::uint64_t>(got);
        if (copied > bytes || !out.write(buf.data(), got)) return false;
    }
    out.close();
    return !in.bad() && !out.fail() && copied == bytes;
}

#endif

bool rename_new(const fs::path& from, const fs::path& to) {
#ifdef __linux__
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0)
        return true;
    if (errno != EINVAL && errno != ENOSYS) return false;  // EEXIST above all
#endif
    std::error_code ec;
    if (fs::exists(fs::symlink_status(to, ec)) || ec) return false;
    fs::rename(from, to, ec);
    return !ec;
}

}  // namespace warmslot::cache
