#include "status/activity.hpp"

#include <algorithm>

namespace warmslot::status {

route_group group_of(std::string_view route) noexcept {
    const auto word = route.substr(0, route.find(';'));
    if (word == "hit") return route_group::hit;
    if (word == "miss") return route_group::miss;
    if (word == "scratch") return route_group::scratch;
    if (word == "pass_through" || word.empty()) return route_group::pass_through;
    return route_group::other;  // failover
}

std::string_view name(route_group g) noexcept {
    switch (g) {
        case route_group::hit: return "hit";
        case route_group::miss: return "miss";
        case route_group::scratch: return "scratch";
        case route_group::pass_through: return "pass_through";
        case route_group::other: return "failover";
    }
    return "failover";
}

void activity::record(request_record r) {
    std::lock_guard lock(mu_);
    if (r.processed) {
        const double total = r.saved_seconds;
        r.saved_seconds = std::max(0.0, total - saved_total_);
        saved_total_ = std::max(saved_total_, total);
    } else {
        r.saved_seconds = 0;
    }
    if (r.disk.starts_with("restored"))
        ++disk_.restores;
    else if (r.disk.starts_with("snapshot"))
        ++disk_.snapshots;
    else if (r.disk.starts_with("restore failed"))
        ++disk_.restore_failures;
    const std::int64_t start = r.at_ms - r.at_ms % bucket_ms;
    if (series_.empty() || series_.back().start_ms < start) {
        series_.push_back(bucket{.start_ms = start});
    }
    // A clock step back lands in the newest bucket: buckets stay ordered.
    auto& b = series_.back();
    ++b.requests;
    // Requests that never reached a backend (admin calls, refusals) have no route.
    if (!r.route.empty()) ++b.routes[static_cast<std::size_t>(group_of(r.route))];
    if (r.processed) b.processed += static_cast<std::uint64_t>(std::max(0L, *r.processed));
    if (r.cached) b.reused += static_cast<std::uint64_t>(std::max(0L, *r.cached));
    if (r.processed) {
        b.prompt_ms_sum += r.prompt_ms;
        ++b.timed;
    }
    b.saved_seconds += r.saved_seconds;
    while (!series_.empty() && series_.front().start_ms <= start - window_ms) series_.pop_front();
    requests_.push_back(std::move(r));
    while (requests_.size() > max_requests) requests_.pop_front();
}

void activity::set_preview(const std::string& backend, int slot, slot_preview p) {
    std::lock_guard lock(mu_);
    previews_[{backend, slot}] = std::move(p);
    if (previews_.size() <= max_previews) return;
    auto oldest = std::min_element(
        previews_.begin(), previews_.end(),
        [](const auto& a, const auto& b) { return a.second.at_ms < b.second.at_ms; });
    previews_.erase(oldest);
}

activity_view activity::view(std::int64_t now_ms, const std::string* tenant) const {
    std::lock_guard lock(mu_);
    activity_view v;
    for (const auto& r : requests_) {
        if (!tenant || r.tenant == *tenant) v.requests.push_back(r);
    }
    for (const auto& b : series_) {
        if (b.start_ms > now_ms - window_ms) v.series.push_back(b);
    }
    for (const auto& [where, p] : previews_) {
        if (!tenant || p.tenant == *tenant) v.previews.emplace(where, p);
    }
    v.disk = disk_;
    return v;
}

std::string preview_text(std::string_view text, std::size_t max_chars) {
    std::string out;
    std::size_t chars = 0;
    bool space = false;
    std::size_t i = 0;
    while (i < text.size() && chars < max_chars) {
        const auto c = static_cast<unsigned char>(text[i]);
        const std::size_t len = c < 0x80           ? 1
                                : (c >> 5) == 0x6  ? 2
                                : (c >> 4) == 0xE  ? 3
                                : (c >> 3) == 0x1E ? 4
                                                   : 1;
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            space = !out.empty();
            ++i;
            continue;
        }
        if (i + len > text.size()) break;  // a cut sequence at the end
        if (space) {
            out += ' ';
            ++chars;
            space = false;
            if (chars >= max_chars) break;
        }
        if (c < 0x20 || (c >= 0x80 && c < 0xC0)) {
            ++i;  // control characters and stray continuation bytes are left out
            continue;
        }
        out.append(text.substr(i, len));
        ++chars;
        i += len;
    }
    const bool more = text.substr(std::min(i, text.size())).find_first_not_of(" \n\r\t") !=
                      std::string_view::npos;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    if (chars >= max_chars && more) out += "…";
    return out;
}

}  // namespace warmslot::status
