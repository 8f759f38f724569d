#include "app/warm_command.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#ifdef _WIN32
#include <io.h>
#define WARMSLOT_ISATTY(fd) _isatty(fd)
#else
#include <unistd.h>
#define WARMSLOT_ISATTY(fd) isatty(fd)
#endif

#include "api/admin.hpp"
#include "api/warm_progress.hpp"
#include "app/client.hpp"

namespace warmslot::app {
namespace {

// Warming a long document on a slow model means prefilling it: allow an hour.
constexpr std::chrono::seconds warm_timeout{3600};

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Shows the progress events of a warm-up: on a terminal one line redrawn in place, otherwise a
// line each time another tenth of the prefix is done and when the save begins.
class progress_printer {
  public:
    explicit progress_printer(bool terminal) : terminal_(terminal) {}

    void show(const api::warm_progress& p) {
        last_ = p;
        const auto now = std::chrono::steady_clock::now();
        if (p.phase == "prefill" && !start_) {
            start_ = now;
            start_done_ = p.done;
        }
        double rate = 0;
        if (start_ && p.done > start_done_) {
            const std::chrono::duration<double> took = now - *start_;
            if (took.count() > 0) rate = static_cast<double>(p.done - start_done_) / took.count();
        }
        const std::string line = api::progress_line(p, rate);
        if (terminal_) {
            std::printf("\r\033[K%s", line.c_str());
            drawn_ = true;
        } else {
            const unsigned tenth = p.total > 0 ? static_cast<unsigned>(p.done * 10 / p.total) : 0;
            if (p.phase == phase_ && tenth <= tenth_) return;
            phase_ = p.phase;
            tenth_ = tenth;
            std::printf("%s\n", line.c_str());
        }
        std::fflush(stdout);
    }
    // Ends a line drawn in place, before anything else is printed.
    void finish() {
        if (drawn_) std::printf("\n");
        drawn_ = false;
        std::fflush(stdout);
    }
    const std::optional<api::warm_progress>& last() const { return last_; }

  private:
    bool terminal_;
    bool drawn_ = false;
    std::string phase_;
    unsigned tenth_ = 0;
    std::optional<std::chrono::steady_clock::time_point> start_;
    std::uint64_t start_done_ = 0;
    std::optional<api::warm_progress> last_;
};

// The report's outcome as one line.
std::string summary(const nlohmann::json& r, double seconds) {
    const auto where = "backend " + r.value("backend", std::string("?")) + " slot " +
                       std::to_string(r.value("slot", -1));
    if (r.value("saved", false)) {
        return "saved " + std::to_string(r.value("tokens", 0)) + " tokens on " + where + " in " +
               std::to_string(std::lround(seconds)) + " s (prefix " +
               r.value("key", std::string()) + ")";
    }
    if (r.value("reason", "") == "already on disk") {
        return "already on disk: " + std::to_string(r.value("tokens", 0)) + " tokens";
    }
    return "not saved: " + r.value("reason", std::string("?"));
}

bool on_disk(const nlohmann::json& report) {
    return report.is_object() &&
           (report.value("saved", false) || report.value("reason", "") == "already on disk");
}

// The plain answer of POST /admin/warm, printed as JSON (--json).
int warm_json(const client_target& target, const std::string& body) {
    const auto r = client_call(target, true, "/admin/warm", body, warm_timeout);
    if (r.status != 200) {
        std::fprintf(stderr, "warmslot warm: %u: %s\n", r.status, error_message(r).c_str());
        return 1;
    }
    const auto report = nlohmann::json::parse(r.body, nullptr, false);
    std::printf("%s\n", report.is_discarded() ? r.body.c_str() : report.dump(2).c_str());
    return on_disk(report) ? 0 : 1;
}

}  // namespace

int warm_command(const std::vector<std::string>& args) {
    auto parsed = api::parse_warm_args(args);
    if (auto* problem = std::get_if<std::string>(&parsed)) {
        std::fprintf(stderr,
                     "warmslot warm: %s\nusage: warmslot warm --model M --system FILE "
                     "[--doc FILE ...] [--url http://127.0.0.1:8080] [--api-key-env VAR] "
                     "[--quiet | --json]\n",
                     problem->c_str());
        return 2;
    }
    const auto& a = std::get<api::warm_args>(parsed);
    try {
        const auto target = client_target_of(a.url, a.api_key_env);
        api::warm_request w;
        w.model = a.model;
        if (!a.system_file.empty()) w.system = read_file(a.system_file);
        for (const auto& f : a.doc_files) w.documents.push_back(read_file(f));
        nlohmann::json body = {
            {"model", w.model}, {"system", w.system}, {"documents", w.documents}};
        if (a.json) return warm_json(target, body.dump());
        progress_printer printer(WARMSLOT_ISATTY(1) != 0);
        nlohmann::json report;
        std::string error;
        const auto start = std::chrono::steady_clock::now();
        const auto r = client_stream(
            target, "/admin/warm", body.dump(), warm_timeout,
            [&](std::string_view name, std::string_view data) {
                const auto j = nlohmann::json::parse(data, nullptr, false);
                if (name == "progress") {
                    if (const auto p = api::warm_progress_of(j); p && !a.quiet) printer.show(*p);
                } else if (name == "report") {
                    report = j;
                } else if (name == "error") {
                    error = j.is_object() && j.contains("error") && j["error"].is_object()
                                ? j["error"].value("message", std::string(data))
                                : std::string(data);
                }
            });
        printer.finish();
        if (r.interrupted) {
            // warmslot cuts its priming call when its client leaves, and llama-server cancels
            // the task of a connection that closed; a save already begun runs to its end.
            const auto& p = printer.last();
            std::string what =
                "warmslot closed its connection to llama-server, which cancels the prefill; "
                "nothing is saved";
            if (p && p->phase == "save") what = "the save had begun: the file may still be written";
            std::fprintf(stderr, "warmslot warm: interrupted; %s\n", what.c_str());
            return 130;
        }
        if (r.status != 200) {
            std::fprintf(stderr, "warmslot warm: %u: %s\n", r.status,
                         error_message(client_response{r.status, r.body}).c_str());
            return 1;
        }
        if (!error.empty() || !report.is_object()) {
            std::fprintf(stderr, "warmslot warm: %s\n",
                         error.empty() ? "the answer ended without a report" : error.c_str());
            return 1;
        }
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (!a.quiet) std::printf("%s\n", summary(report, took.count()).c_str());
        return on_disk(report) ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warmslot warm: %s\n", e.what());
        return 1;
    }
}

}  // namespace warmslot::app
