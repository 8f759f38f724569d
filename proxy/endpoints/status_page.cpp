// The dashboard's answers: its status JSON (built by status/status.cpp from the registry, the
// disk index, read on the index thread, and the activity the pipeline records once per
// request) and the page's files, built into the binary.
#include <chrono>
#include <nlohmann/json.hpp>

#include "endpoints/endpoints.hpp"
#include "status/assets.hpp"
#include "status/status.hpp"

namespace warmslot::endpoints {
namespace {

std::vector<status::disk_dir> disk_dirs(const config::config& cfg,
                                        std::vector<tier::disk_listing> listed) {
    std::vector<status::disk_dir> out;
    for (auto& l : listed) {
        status::disk_dir d{l.dir, {}, cfg.cache.max_disk, std::move(l.files)};
        for (const auto& b : cfg.backends) {
            if (!b.retired && b.slot_save_path == l.dir) d.backends.push_back(b.name);
        }
        out.push_back(std::move(d));
    }
    return out;
}

}  // namespace

awaitable<answer> status_json(sources s, const status::activity& activity,
                              const std::string* tenant, std::function<std::size_t(int)> held) {
    auto& reg = *s.reg;
    status::status_input in;
    in.cfg = s.cfg;
    in.views = reg.snapshot();
    for (std::size_t i = 0; i < in.views.size(); ++i) {
        in.infos.push_back(reg.info(static_cast<int>(i)));
        in.asleep.push_back(reg.asleep(static_cast<int>(i)));
        in.held.push_back(held(static_cast<int>(i)));
    }
    in.totals = reg.totals();
    if (s.disk) in.totals.prompt_tokens_processed += s.disk->primed_tokens_total();
    if (s.disk) in.disk = disk_dirs(*s.cfg, co_await s.disk->listing());
    in.now_ms = status::unix_ms();
    in.now = routing::clock::now();
    in.activity = activity.view(in.now_ms, tenant);
    in.tenant = tenant;
    auto doc = status::build_status(in);
    if (s.states) doc["swaps"] = s.states->swap_status();
    answer a;
    a.body = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    co_return a;
}

answer dashboard_file(std::string_view path) {
    const auto name = path == "/warmslot" || path == "/warmslot/" ? std::string_view("index.html")
                                                                  : path.substr(10);
    const auto asset = status::find_asset(name);
    if (!asset)
        return answer::failed(api::error_kind::not_found, "unknown endpoint " + std::string(path));
    answer a;
    a.content_type = std::string(asset->content_type);
    a.body = std::string(asset->body);
    // Everything the page needs comes from warmslot itself.
    a.headers.emplace_back("Content-Security-Policy",
                           "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                           "script-src 'self'; connect-src 'self'; frame-ancestors 'none'");
    return a;
}

}  // namespace warmslot::endpoints
