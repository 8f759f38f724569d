// warmslot's admin endpoints and the `warmslot warm` command: request shapes. Pure.
//
// POST /admin/snapshot  {"backend": name}   (body optional; default: every backend)
// POST /admin/warm      {"model": M, "system": "...", "documents": ["...", ...]}
//
// A warm-up primes and saves the stable prefix of the chat request that warm_chat_body builds.
// A later chat request reuses it when it starts with exactly the same messages and names the
// same model, with no other field that changes the rendered prompt (tools, chat_template_kwargs,
// ...; sampling fields do not matter):
//   {"model": M, "messages": [
//      {"role": "system", "content": system},      (left out when system is "")
//      {"role": "user", "content": documents[0]},  (one user message per document, in order)
//      ...
//      {"role": "user", "content": question}]}     (the final user turn: not part of the prefix)
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace warmslot::api {

struct warm_request {
    std::string model;
    std::string system;
    std::vector<std::string> documents;
};

// The request, or the problem with it (for a 400).
std::variant<warm_request, std::string> parse_warm_request(const nlohmann::json& body);

// The chat request whose stable prefix is system + documents, ending with `question`.
nlohmann::json warm_chat_body(const warm_request& w, std::string_view question);

// The backend named by a POST /admin/snapshot body (std::nullopt: all), or the problem.
// An empty body means all backends.
std::variant<std::optional<std::string>, std::string> parse_snapshot_request(std::string_view body);

// `warmslot warm` command line (the arguments after "warm").
struct warm_args {
    std::string model;
    std::string system_file;
    std::vector<std::string> doc_files;
    std::string url = "http://127.0.0.1:8080";
    std::string api_key_env;  // name of the variable holding the key ("" = no key)
    bool quiet = false;       // --quiet: no progress, no summary; errors only
    bool json = false;        // --json: no progress; the server's JSON report
};
std::variant<warm_args, std::string> parse_warm_args(const std::vector<std::string>& args);

}  // namespace warmslot::api
