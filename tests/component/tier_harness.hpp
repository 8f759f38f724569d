// warmslot as the app runs it (workers, monitor, disk tier, pipeline, server; its index and
// file threads) in this process, in front of fake llama-servers, with slot files in a temporary
// directory; and a small blocking client for it. Beast stays in tier_harness.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "eventually.hpp"
#include "fake_llama.hpp"

namespace warmslot::testing {

struct http_reply {
    unsigned status = 0;
    std::map<std::string, std::string> headers;  // names in lower case
    std::string body;
    std::string header(const std::string& lower_name) const {
        const auto it = headers.find(lower_name);
        return it == headers.end() ? std::string() : it->second;
    }
    std::string head() const {  // every header, one a line (for failure messages)
        std::string out;
        for (const auto& [name, value] : headers) out += name + ": " + value + "\n";
        return out;
    }
};

// One request on a new connection; a 5 s deadline over all of it. status 0: no answer.
http_reply http_call(std::uint16_t port, const std::string& method, const std::string& target,
                     const std::string& body = "");

// A directory under the system's temporary one, removed with its content at the end.
struct temp_dir {
    explicit temp_dir(const std::filesystem::path& base = std::filesystem::temp_directory_path());
    ~temp_dir();
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    std::filesystem::path path;
};

// A config for the proxy in front of `backends`: quiet logs, short timeouts, a 100 ms
// reconcile interval, the disk tier on under `cache_dir` with 256-token prefixes worth a file.
config::config tier_config(std::vector<config::backend> backends, const std::string& cache_dir);
// A url backend at the fake, its slot directory the fake's.
config::backend backend_for(const std::string& name, const fake_llama& fake);

class tier_proxy {
  public:
    explicit tier_proxy(config::config cfg);
    ~tier_proxy();
    tier_proxy(const tier_proxy&) = delete;
    tier_proxy& operator=(const tier_proxy&) = delete;

    std::uint16_t port() const;
    http_reply post(const std::string& target, const nlohmann::json& body) const;
    http_reply chat(const nlohmann::json& body) const { return post("/v1/chat/completions", body); }
    nlohmann::json status() const;  // GET /warmslot/status
    std::string metrics() const;    // GET /metrics
    // The files every slot directory's index lists (status JSON `disk.dirs[].files`), by dir.
    std::map<std::string, nlohmann::json> indexed_files() const;
    // What the registry believes slot `slot` of backend `backend` holds (status JSON `tokens`;
    // 0 when nothing), and whether the backend is ready (healthy, checked, probed).
    std::uint64_t believed_tokens(int backend, int slot) const;
    bool ready(int backend) const;
    // The config as a reload leaves it for the next requests (the same backends; nothing else
    // of a reload, such as the registry's sync, is done).
    void publish(config::config next);

    struct parts;

  private:
    std::unique_ptr<parts> p_;
};

// A chat body: a system message (`doc`), then one user message (`question`).
nlohmann::json chat_body(const std::string& doc, const std::string& question, bool stream = false);
// `n` bytes of text that differ from the other seeds' from the first line on.
std::string document(int seed, std::size_t n);
// The tokens of the rendered chat body, as the fake tokenizes its prompt.
std::vector<int> prompt_tokens(const nlohmann::json& body);

}  // namespace warmslot::testing
