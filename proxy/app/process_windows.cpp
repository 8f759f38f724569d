// Windows implementation of process.hpp: CreateProcessW into a job object, so that stopping the
// child also stops everything it started. There is no SIGTERM: terminate() sends Ctrl-Break to
// the child's console process group when warmslot has a console (llama-server stops gracefully
// on it), waits up to the grace period, then terminates the job.
#include <windows.h>
#include <winsock2.h>

#include <algorithm>
#include <cstdio>
#include <cwchar>
#include <cwctype>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "app/process.hpp"

namespace warmslot::app {
namespace {

std::system_error os_error(DWORD error, const std::string& what) {
    return std::system_error(static_cast<int>(error), std::system_category(), what);
}

std::wstring widen(const std::string& utf8) {
    if (utf8.empty()) return {};
    const int n =
        ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), nullptr, 0);
    std::wstring out(static_cast<std::size_t>(n), L'\0');
    ::MultiByteToWideChar(CP_UTF8, 0, utf8.data(), static_cast<int>(utf8.size()), out.data(), n);
    return out;
}

std::string narrow(const wchar_t* text, std::size_t size) {
    if (size == 0) return {};
    const int n = ::WideCharToMultiByte(CP_UTF8, 0, text, static_cast<int>(size), nullptr, 0,
                                        nullptr, nullptr);
    std::string out(static_cast<std::size_t>(n), '\0');
    ::WideCharToMultiByte(CP_UTF8, 0, text, static_cast<int>(size), out.data(), n, nullptr,
                          nullptr);
    return out;
}

// A CreateProcessW environment block: NAME=value entries sorted by name ignoring case (as
// Windows keeps them), each ended by a NUL, the block by another.
std::wstring environment_block(const std::vector<std::string>& entries) {
    std::vector<std::wstring> wide;
    for (const auto& e : entries) wide.push_back(widen(e));
    const auto name_less = [](const std::wstring& a, const std::wstring& b) {
        const auto an = a.substr(0, a.find(L'='));
        const auto bn = b.substr(0, b.find(L'='));
        return std::lexicographical_compare(
            an.begin(), an.end(), bn.begin(), bn.end(),
            [](wchar_t x, wchar_t y) { return std::towupper(x) < std::towupper(y); });
    };
    std::stable_sort(wide.begin(), wide.end(), name_less);
    std::wstring block;
    for (const auto& w : wide) block += w + L'\0';
    block += L'\0';
    return block;
}

// One argument quoted the way CommandLineToArgvW and the C runtime split it again.
void append_quoted(std::wstring& line, const std::wstring& arg) {
    if (!arg.empty() && arg.find_first_of(L" \t\n\v\"") == std::wstring::npos) {
        line += arg;
        return;
    }
    line += L'"';
    for (std::size_t i = 0;; ++i) {
        std::size_t backslashes = 0;
        while (i < arg.size() && arg[i] == L'\\') ++i, ++backslashes;
        if (i == arg.size()) {
            line.append(backslashes * 2, L'\\');
            break;
        }
        if (arg[i] == L'"') {
            line.append(backslashes * 2 + 1, L'\\');
        } else {
            line.append(backslashes, L'\\');
        }
        line += arg[i];
    }
    line += L'"';
}

struct handle {
    HANDLE h = nullptr;
    handle() = default;
    explicit handle(HANDLE v) : h(v == INVALID_HANDLE_VALUE ? nullptr : v) {}
    handle(handle&& o) noexcept : h(std::exchange(o.h, nullptr)) {}
    handle& operator=(handle&& o) noexcept {
        std::swap(h, o.h);
        return *this;
    }
    ~handle() {
        if (h) ::CloseHandle(h);
    }
};

handle inheritable_file(const std::wstring& path, DWORD access, DWORD disposition) {
    SECURITY_ATTRIBUTES sa{sizeof sa, nullptr, TRUE};
    return handle(::CreateFileW(path.c_str(), access, FILE_SHARE_READ | FILE_SHARE_WRITE, &sa,
                                disposition, FILE_ATTRIBUTE_NORMAL, nullptr));
}

class windows_process final : public process {
  public:
    windows_process(handle job, handle proc, DWORD pid)
        : job_(std::move(job)), proc_(std::move(proc)), pid_(pid) {}

    ~windows_process() override {
        if (status_) return;
        ::TerminateJobObject(job_.h, 1);
        ::WaitForSingleObject(proc_.h, INFINITE);
    }

    std::int64_t pid() const noexcept override { return pid_; }

    std::optional<exit_status> poll() override {
        if (!status_ && ::WaitForSingleObject(proc_.h, 0) == WAIT_OBJECT_0) record();
        return status_;
    }

    exit_status terminate(std::chrono::milliseconds grace) override {
        if (poll()) return *status_;
        // Only reaches the child when it shares our console; a service has none.
        if (::GetConsoleWindow() != nullptr) ::GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid_);
        ::WaitForSingleObject(proc_.h, static_cast<DWORD>(grace.count()));
        ::TerminateJobObject(job_.h, 1);  // and whatever the child left behind
        ::WaitForSingleObject(proc_.h, INFINITE);
        record();
        return *status_;
    }

  private:
    void record() {
        DWORD code = 0;
        ::GetExitCodeProcess(proc_.h, &code);
        status_ = exit_status{true, static_cast<int>(code), 0};
    }

    handle job_;
    handle proc_;
    DWORD pid_;
    std::optional<exit_status> status_;
};

handle make_job() {
    handle job(::CreateJobObjectW(nullptr, nullptr));
    if (!job.h) throw os_error(::GetLastError(), "cannot create a job object");
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION limits{};
    // If warmslot dies, Windows closes the job handle and kills the children with it.
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    ::SetInformationJobObject(job.h, JobObjectExtendedLimitInformation, &limits, sizeof limits);
    return job;
}

}  // namespace

std::string exit_status::describe() const {
    if (exited && code < 0) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08X", static_cast<unsigned>(code));
        return std::string("exited with status ") + hex;
    }
    if (exited) return "exited with code " + std::to_string(code);
    return "killed by signal " + std::to_string(signal);
}

std::unique_ptr<process> start_process(const process_options& options) {
    if (options.argv.empty() || options.argv.front().empty())
        throw os_error(ERROR_INVALID_PARAMETER, "cannot start a process: empty command");
    const std::string& program = options.argv.front();
    std::wstring line;
    for (const auto& arg : options.argv) {
        if (!line.empty()) line += L' ';
        append_quoted(line, widen(arg));
    }
    handle in = inheritable_file(L"NUL", GENERIC_READ, OPEN_EXISTING);
    handle out;
    if (!options.log_path.empty()) {
        out = inheritable_file(widen(options.log_path), FILE_APPEND_DATA, OPEN_ALWAYS);
        if (!out.h) throw os_error(::GetLastError(), "cannot open log file " + options.log_path);
    }
    // Only these handles are inherited, not the proxy's sockets and files.
    HANDLE inherit[2] = {in.h, out.h};
    SIZE_T size = 0;
    ::InitializeProcThreadAttributeList(nullptr, 1, 0, &size);
    std::vector<char> storage(size);
    auto* attrs = reinterpret_cast<LPPROC_THREAD_ATTRIBUTE_LIST>(storage.data());
    ::InitializeProcThreadAttributeList(attrs, 1, 0, &size);
    ::UpdateProcThreadAttribute(attrs, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, inherit,
                                (out.h ? 2 : 1) * sizeof(HANDLE), nullptr, nullptr);
    STARTUPINFOEXW si{};
    si.StartupInfo.cb = sizeof si;
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = in.h;
    si.StartupInfo.hStdOutput = out.h ? out.h : ::GetStdHandle(STD_OUTPUT_HANDLE);
    si.StartupInfo.hStdError = out.h ? out.h : ::GetStdHandle(STD_ERROR_HANDLE);
    si.lpAttributeList = attrs;
    handle job = make_job();
    std::wstring env = options.env ? environment_block(*options.env) : std::wstring();
    PROCESS_INFORMATION pi{};
    const BOOL ok =
        ::CreateProcessW(nullptr, line.data(), nullptr, nullptr, TRUE,
                         CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP |
                             EXTENDED_STARTUPINFO_PRESENT | CREATE_UNICODE_ENVIRONMENT,
                         options.env ? env.data() : nullptr, nullptr, &si.StartupInfo, &pi);
    const DWORD error = ::GetLastError();
    ::DeleteProcThreadAttributeList(attrs);
    if (!ok) throw os_error(error, "cannot start " + program);
    handle thread(pi.hThread);
    handle proc(pi.hProcess);
    ::AssignProcessToJobObject(job.h, proc.h);
    ::ResumeThread(thread.h);
    return std::make_unique<windows_process>(std::move(job), std::move(proc), pi.dwProcessId);
}

std::vector<std::string> current_environment() {
    std::vector<std::string> out;
    wchar_t* block = ::GetEnvironmentStringsW();
    if (block == nullptr) return out;
    for (const wchar_t* p = block; *p != L'\0';) {
        const std::size_t n = std::wcslen(p);
        out.push_back(narrow(p, n));
        p += n + 1;
    }
    ::FreeEnvironmentStringsW(block);
    return out;
}

bool env_names_ignore_case() { return true; }

// The job object every child joins ends them with warmslot: no guard process needed.
std::string self_guard() { return ""; }

int exec_child(const std::vector<std::string>&) {
    std::fputs("warmslot exec-child: not used on Windows\n", stderr);
    return 2;
}

std::uint16_t pick_free_loopback_port() {
    WSADATA data;
    if (const int error = ::WSAStartup(MAKEWORD(2, 2), &data); error != 0)
        throw os_error(static_cast<DWORD>(error), "cannot start Winsock");
    const SOCKET s = ::socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int len = sizeof addr;
    const bool ok = s != INVALID_SOCKET &&
                    ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                    ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    const int error = ::WSAGetLastError();
    if (s != INVALID_SOCKET) ::closesocket(s);
    ::WSACleanup();
    if (!ok) throw os_error(static_cast<DWORD>(error), "cannot pick a free loopback port");
    return ntohs(addr.sin_port);
}

// Supervised backends listen on loopback ports on Windows.
std::string make_private_dir() { return ""; }

bool is_private_dir(const std::string&, std::string& why) {
    why = "not used on Windows";
    return false;
}

void remove_file(const std::string& path) { ::DeleteFileA(path.c_str()); }

void remove_private_dir(const std::string&) {}

}  // namespace warmslot::app
