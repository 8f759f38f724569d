// config::parse and load_file: the YAML text into documents, and the top level of the file (the
// sections it may have, and the checks that need more than one of them). Each section is read
// in a file of its own; reader.hpp says which.
#include "config/config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>
#include <utility>

#include "config/reader.hpp"

namespace warmslot::config {
namespace detail {
namespace {

std::string format_error(const std::string& source, int line, const std::string& key_path,
                         const std::string& problem) {
    std::string out = source;
    if (line > 0) out += ":" + std::to_string(line);
    out += ": ";
    if (!key_path.empty()) out += key_path + ": ";
    return out + problem;
}

}  // namespace

// The sections a file may have. A section that depends on another is read, or checked again,
// once the whole file is known: in the file the sections may come in any order.
config reader::read(const YAML::Node& root) {
    const entry top{root, "", line_of(root, 1)};
    if (!root.IsMap())
        fail(top.line, "", "expected a map of settings, found " + std::string(kind_of(root)));
    config c;
    int backends_line = 0;
    std::optional<entry> cache;   // its tenant budgets are checked once the keys are known
    std::optional<entry> groups;  // read once the backends are known
    read_map(top, {{"listen", [&](const entry& v) { c.listen = read_listen(v); }},
                   {"tls", [&](const entry& v) { c.tls = read_tls(v); }},
                   {"backends",
                    [&](const entry& v) {
                        c.backends = read_backends(v);
                        backends_line = v.line;
                    }},
                   {"api_keys", [&](const entry& v) { read_api_keys(v, c); }},
                   {"http", [&](const entry& v) { c.http = read_http(v); }},
                   {"limits", [&](const entry& v) { c.limits = read_limits(v); }},
                   {"timeouts", [&](const entry& v) { c.timeouts = read_timeouts(v); }},
                   {"routing", [&](const entry& v) { c.routing = read_routing(v); }},
                   {"cache",
                    [&](const entry& v) {
                        c.cache = read_cache(v);
                        cache = v;
                    }},
                   {"rewrite", [&](const entry& v) { c.rewrite = read_rewrite(v); }},
                   {"log", [&](const entry& v) { c.log = read_log(v); }},
                   {"dashboard", [&](const entry& v) { c.dashboard = read_dashboard(v); }},
                   {"swap_groups", [&](const entry& v) { groups = v; }},
                   {"tenants", [&](const entry& v) { c.tenants = read_tenants(v); }}});
    if (backends_line == 0)
        fail(top.line, "backends", "is required; list at least one llama-server");
    if (groups) c.swap_groups = read_swap_groups(*groups, c, top);
    if (!cache) c.cache.dir = default_cache_dir();
    if (cache) check_tenant_budgets(*cache, c);
    default_slot_paths(c, top, backends_line);
    if (cache) check_shared_dir(*cache, c);
    if (cache) check_isolation(*cache, c);
    return c;
}

}  // namespace detail

config_error::config_error(std::string source, int line, std::string key_path, std::string problem)
    : std::runtime_error(detail::format_error(source, line, key_path, problem)),
      key_path_(std::move(key_path)),
      line_(line),
      problem_(std::move(problem)) {}

env_lookup process_env() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
    };
}

namespace {

// Where each document of a text starts. yaml-cpp 0.7 never gets past a ',' where a document's
// node should start (",", "[a]\n,", "---\n,"): it reports an empty document there again and
// again, and LoadAll collects them until memory runs out.
class document_starts final : public YAML::EventHandler {
  public:
    std::vector<YAML::Mark> marks;
    void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// Throws config_error at a document that starts where the one before it did; LoadAll ends on
// any other text.
void check_documents_advance(const std::string& text, const std::string& source) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    document_starts starts;
    while (parser.HandleNextDocument(starts)) {
        const auto n = starts.marks.size();
        if (n < 2 || starts.marks[n - 1].pos != starts.marks[n - 2].pos) continue;
        const auto& at = starts.marks[n - 1];
        const auto pos = std::min(static_cast<std::size_t>(std::max(at.pos, 0)), text.size());
        throw config_error(source, std::max(at.line, 0) + 1, "",
                           "invalid YAML: unexpected '" + text.substr(pos, 1) + "'");
    }
}

}  // namespace

config parse(std::string_view yaml_text, std::string_view source, const env_lookup& env) {
    const std::string src(source);
    std::vector<YAML::Node> documents;
    try {
        const std::string text(yaml_text);
        check_documents_advance(text, src);
        documents = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
        throw config_error(src, e.mark.is_null() ? 0 : e.mark.line + 1, "",
                           "invalid YAML: " + e.msg);
    }
    if (documents.empty() || documents.front().IsNull())
        throw config_error(src, 1, "", "config is empty; at least backends is required");
    if (documents.size() > 1) {
        throw config_error(src, detail::line_of(documents[1], 0), "",
                           "only one YAML document is allowed (found a second '---')");
    }
    return detail::reader(source, env).read(documents.front());
}

config load_file(const std::string& path, const env_lookup& env) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw config_error(path, 0, "", "is a directory, not a file");
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        const int error = errno;
        throw config_error(path, 0, "", "cannot open: " + std::generic_category().message(error));
    }
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    if (file.bad()) throw config_error(path, 0, "", "cannot read the file");
    return parse(text, path, env);
}

}  // namespace warmslot::config
