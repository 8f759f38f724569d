// Windows implementation of service.hpp: the Service Control Manager's side of warmslot.
#include <spdlog/spdlog.h>
#include <windows.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>

#include "app/app.hpp"
#include "app/service.hpp"
#include "config/config.hpp"

namespace warmslot::app {
namespace {

namespace fs = std::filesystem;
constexpr const wchar_t* service_name = L"warmslot";

fs::path from_utf8(const std::string& text) {
    return fs::path(std::u8string(text.begin(), text.end()));
}

std::string to_utf8(const fs::path& p) {
    const std::u8string text = p.u8string();
    return {text.begin(), text.end()};
}

struct service_paths {
    fs::path config;
    fs::path log;
};

fs::path program_data() {  // %ProgramData%\warmslot
    const char* dir = std::getenv("ProgramData");
    return fs::path(dir && *dir ? dir : "C:\\ProgramData") / "warmslot";
}

// --config FILE and --log FILE, defaulting to %ProgramData%\warmslot. false: a bad argument.
bool parse_paths(const std::vector<std::string>& args, std::size_t from, service_paths& out) {
    out = {program_data() / "warmslot.yaml", program_data() / "logs" / "warmslot.log"};
    for (std::size_t i = from; i < args.size(); i += 2) {
        if (i + 1 >= args.size()) return false;
        if (args[i] == "--config") {
            out.config = fs::absolute(from_utf8(args[i + 1]));
        } else if (args[i] == "--log") {
            out.log = fs::absolute(from_utf8(args[i + 1]));
        } else {
            return false;
        }
    }
    return true;
}

std::string utf8(const std::wstring& wide) {
    if (wide.empty()) return {};
    const int n = ::WideCharToMultiByte(CP_UTF8, 0, wide.data(), static_cast<int>(wide.size()),
                                        nullptr, 0, nullptr, nullptr);
    std::string out(static_cast<std::size_t>(n), '\0');
    ::WideCharToMultiByte(CP_UTF8, 0, wide.data(), static_cast<int>(wide.size()), out.data(), n,
                          nullptr, nullptr);
    return out;
}

std::string system_message(DWORD error) {
    wchar_t* text = nullptr;
    ::FormatMessageW(
        FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
        nullptr, error, 0, reinterpret_cast<wchar_t*>(&text), 0, nullptr);
    std::string out = text ? utf8(text) : "error " + std::to_string(error);
    if (text) ::LocalFree(text);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

int fail(const char* what) {
    const DWORD error = ::GetLastError();
    std::fprintf(stderr, "warmslot: %s: %s\n", what, system_message(error).c_str());
    return 1;
}

// One line in the Application event log, source "warmslot" (registered by `service install`).
void event_log(WORD type, const std::string& message) {
    HANDLE source = ::RegisterEventSourceW(nullptr, service_name);
    if (!source) return;
    const std::wstring text = from_utf8(message).wstring();
    const wchar_t* strings[] = {text.c_str()};
    ::ReportEventW(source, type, 0, 0, nullptr, 1, 0, strings, nullptr);
    ::DeregisterEventSource(source);
}

struct sc_handle {
    SC_HANDLE h;
    explicit sc_handle(SC_HANDLE v) : h(v) {}
    sc_handle(const sc_handle&) = delete;
    sc_handle& operator=(const sc_handle&) = delete;
    ~sc_handle() {
        if (h) ::CloseServiceHandle(h);
    }
};

std::wstring quoted(const fs::path& p) { return L"\"" + p.wstring() + L"\""; }

void register_event_source() {
    HKEY key = nullptr;
    if (::RegCreateKeyExW(HKEY_LOCAL_MACHINE,
                          L"SYSTEM\\CurrentControlSet\\Services\\EventLog\\Application\\warmslot",
                          0, nullptr, 0, KEY_SET_VALUE, nullptr, &key, nullptr) != ERROR_SUCCESS)
        return;
    const DWORD types = EVENTLOG_ERROR_TYPE | EVENTLOG_WARNING_TYPE | EVENTLOG_INFORMATION_TYPE;
    ::RegSetValueExW(key, L"TypesSupported", 0, REG_DWORD, reinterpret_cast<const BYTE*>(&types),
                     sizeof types);
    ::RegCloseKey(key);
}

// Restart after 5 s, twice more after 30 s; the failure count resets after a day. A minute to
// stop at a system shutdown.
void set_recovery(SC_HANDLE service) {
    SC_ACTION actions[] = {
        {SC_ACTION_RESTART, 5000}, {SC_ACTION_RESTART, 30000}, {SC_ACTION_RESTART, 30000}};
    SERVICE_FAILURE_ACTIONSW failure{};
    failure.dwResetPeriod = 24 * 3600;
    failure.cActions = 3;
    failure.lpsaActions = actions;
    ::ChangeServiceConfig2W(service, SERVICE_CONFIG_FAILURE_ACTIONS, &failure);
    SERVICE_PRESHUTDOWN_INFO preshutdown{60000};  // time to drain and save slots
    ::ChangeServiceConfig2W(service, SERVICE_CONFIG_PRESHUTDOWN_INFO, &preshutdown);
    wchar_t description[] = L"Caching reverse proxy for llama-server";
    SERVICE_DESCRIPTIONW d{description};
    ::ChangeServiceConfig2W(service, SERVICE_CONFIG_DESCRIPTION, &d);
}

int install(const service_paths& paths) {
    wchar_t exe[MAX_PATH];
    ::GetModuleFileNameW(nullptr, exe, MAX_PATH);
    std::error_code ec;
    fs::create_directories(paths.log.parent_path(), ec);
    const std::wstring command = quoted(exe) + L" service run --config " + quoted(paths.config) +
                                 L" --log " + quoted(paths.log);
    sc_handle scm(::OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CREATE_SERVICE));
    if (!scm.h) return fail("cannot open the service manager (run as Administrator)");
    sc_handle service(::CreateServiceW(scm.h, service_name, L"warmslot", SERVICE_ALL_ACCESS,
                                       SERVICE_WIN32_OWN_PROCESS, SERVICE_AUTO_START,
                                       SERVICE_ERROR_NORMAL, command.c_str(), nullptr, nullptr,
                                       nullptr, nullptr, nullptr));
    if (!service.h) return fail("cannot create the service");
    set_recovery(service.h);
    register_event_source();
    std::printf("service warmslot installed: %s\n", utf8(command).c_str());
    return 0;
}

int uninstall() {
    sc_handle scm(::OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT));
    if (!scm.h) return fail("cannot open the service manager (run as Administrator)");
    sc_handle service(::OpenServiceW(scm.h, service_name, DELETE));
    if (!service.h || !::DeleteService(service.h)) return fail("cannot delete the service");
    ::RegDeleteKeyW(HKEY_LOCAL_MACHINE,
                    L"SYSTEM\\CurrentControlSet\\Services\\EventLog\\Application\\warmslot");
    std::puts("service warmslot removed");
    return 0;
}

// Starts or stops the service and waits up to a minute for it to get there.
int control(bool start) {
    sc_handle scm(::OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT));
    if (!scm.h) return fail("cannot open the service manager");
    sc_handle service(
        ::OpenServiceW(scm.h, service_name, SERVICE_START | SERVICE_STOP | SERVICE_QUERY_STATUS));
    if (!service.h) return fail("cannot open the service");
    SERVICE_STATUS status{};
    const BOOL ok = start ? ::StartServiceW(service.h, 0, nullptr)
                          : ::ControlService(service.h, SERVICE_CONTROL_STOP, &status);
    // Like `systemctl start`, starting a running service succeeds.
    const bool already = !ok && start && ::GetLastError() == ERROR_SERVICE_ALREADY_RUNNING;
    if (!ok && !already)
        return fail(start ? "cannot start the service" : "cannot stop the service");
    const DWORD want = start ? SERVICE_RUNNING : SERVICE_STOPPED;
    for (int i = 0; i < 600 && ::QueryServiceStatus(service.h, &status); ++i) {
        if (status.dwCurrentState == want) {
            std::printf("service warmslot %s\n", start ? "running" : "stopped");
            return 0;
        }
        if (start && status.dwCurrentState == SERVICE_STOPPED) break;
        ::Sleep(100);
    }
    std::fprintf(stderr, "warmslot: the service did not reach the %s state (see the event log)\n",
                 start ? "running" : "stopped");
    return 1;
}

// The running service: one per process, so its state is global as the SCM API wants it.
// status_mutex orders the reports of the service thread and the control handler's thread.
SERVICE_STATUS_HANDLE status_handle = nullptr;
SERVICE_STATUS current{};
std::mutex status_mutex;
bool stop_received = false;  // guarded by status_mutex
service_paths run_paths;

// With status_mutex held. Controls are accepted only while running; should a stop still reach
// on_control during the start, it is honoured once warmslot is ready.
void report(DWORD state, DWORD exit_code = NO_ERROR, DWORD wait_hint_ms = 0) {
    current.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
    current.dwCurrentState = state;
    current.dwControlsAccepted =
        state == SERVICE_RUNNING
            ? SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_PRESHUTDOWN | SERVICE_ACCEPT_SHUTDOWN
            : 0;
    current.dwWin32ExitCode = exit_code;
    current.dwWaitHint = wait_hint_ms;
    current.dwCheckPoint =
        state == SERVICE_RUNNING || state == SERVICE_STOPPED ? 0 : current.dwCheckPoint + 1;
    ::SetServiceStatus(status_handle, &current);
}

void report_locked(DWORD state, DWORD exit_code = NO_ERROR, DWORD wait_hint_ms = 0) {
    const std::lock_guard lock(status_mutex);
    report(state, exit_code, wait_hint_ms);
}

// run() listens and honours stop requests: the service is running, unless a stop came first.
void on_ready() {
    const std::lock_guard lock(status_mutex);
    if (!stop_received) report(SERVICE_RUNNING);
}

DWORD WINAPI on_control(DWORD control, DWORD, void*, void*) {
    // Pre-shutdown comes first at a system shutdown and may take up to the pre-shutdown timeout
    // (set by install); shutdown alone allows only a few seconds.
    if (control == SERVICE_CONTROL_STOP || control == SERVICE_CONTROL_PRESHUTDOWN ||
        control == SERVICE_CONTROL_SHUTDOWN) {
        {
            const std::lock_guard lock(status_mutex);
            stop_received = true;
            report(SERVICE_STOP_PENDING, NO_ERROR, 60000);
        }
        // The same graceful stop as SIGTERM on Linux. A stop that comes while run() is still
        // starting is remembered and honoured once it is ready.
        request_stop();
        return NO_ERROR;
    }
    return control == SERVICE_CONTROL_INTERROGATE ? NO_ERROR : ERROR_CALL_NOT_IMPLEMENTED;
}

void WINAPI service_main(DWORD, wchar_t**) {
    status_handle = ::RegisterServiceCtrlHandlerExW(service_name, on_control, nullptr);
    if (!status_handle) return;
    report_locked(SERVICE_START_PENDING, NO_ERROR, 30000);
    int code = 1;
    try {
        // Relative paths in the config are relative to the config's directory.
        ::SetCurrentDirectoryW(run_paths.config.parent_path().wstring().c_str());
        auto cfg = config::load_file(to_utf8(run_paths.config));
        event_log(EVENTLOG_INFORMATION_TYPE, "warmslot starting with " + to_utf8(run_paths.config));
        run_options options{to_utf8(run_paths.log), false, on_ready};
        code = run(to_utf8(run_paths.config), std::move(cfg), options);
        event_log(EVENTLOG_INFORMATION_TYPE, "warmslot stopped");
    } catch (const std::exception& e) {
        spdlog::error("service failed: {}", e.what());
        event_log(EVENTLOG_ERROR_TYPE, std::string("warmslot failed: ") + e.what());
    }
    spdlog::info("service reports stopped (exit code {})", code);
    report_locked(SERVICE_STOPPED, code == 0 ? NO_ERROR : ERROR_SERVICE_SPECIFIC_ERROR);
}

int run_service(const service_paths& paths) {
    run_paths = paths;
    // A service has no console: detach from any inherited one, so that its close event cannot
    // end the process.
    ::FreeConsole();
    wchar_t name[] = L"warmslot";
    SERVICE_TABLE_ENTRYW table[] = {{name, service_main}, {nullptr, nullptr}};
    if (!::StartServiceCtrlDispatcherW(table))
        return fail("not started by the service manager (use `warmslot service start`)");
    return 0;
}

}  // namespace

int service_command(const std::vector<std::string>& args) {
    const std::string verb = args.empty() ? "" : args[0];
    service_paths paths;
    if ((verb == "install" || verb == "run") && parse_paths(args, 1, paths))
        return verb == "install" ? install(paths) : run_service(paths);
    if (args.size() == 1 && verb == "uninstall") return uninstall();
    if (args.size() == 1 && (verb == "start" || verb == "stop")) return control(verb == "start");
    std::fputs(
        "usage: warmslot service install [--config FILE] [--log FILE]\n"
        "       warmslot service uninstall | start | stop\n",
        stderr);
    return 2;
}

}  // namespace warmslot::app
