#include "cache/shared_tier.hpp"

#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "cache/index.hpp"
#include "cache/safe_file.hpp"
#include "cache/slot_file.hpp"
#include "cache/tenant_budget.hpp"

namespace warmslot::cache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr const char* lock_name = ".warmslot-evict.lock";

// The key of "ws-<key>.bin" or "ws-<key>.json" ("" for any other name).
std::string key_of(std::string_view name, std::string_view suffix) {
    if (!name.starts_with("ws-") || !name.ends_with(suffix)) return "";
    std::string key(name.substr(3, name.size() - 3 - suffix.size()));
    try {
        (void)file_name_for(key);  // only keys that name a slot file
        return key;
    } catch (const std::invalid_argument&) {
        return "";
    }
}

// A manifest's text: a regular file (never a link or a FIFO, judged on the open descriptor) of
// at most max_manifest_bytes.
std::optional<std::string> read_small(const fs::path& file) {
    return read_regular(file, max_manifest_bytes);
}

// A part of a name other users of the directory cannot guess.
std::string unique_suffix(const std::string& tag) { return tag + "-" + random_name_part(); }

// Writes the manifest under a new temporary name (O_EXCL: nothing planted there is followed)
// and renames it into place.
bool write_manifest(const fs::path& root, const shared_entry& e, const std::string& tag) {
    const auto tmp = root / ("ws-" + e.key + "-" + unique_suffix(tag) + ".json.tmp");
    if (!write_new(tmp, manifest_text(e))) return false;
    std::error_code ec;
    fs::rename(tmp, root / manifest_name_for(e.key), ec);
    if (ec) fs::remove(tmp, ec);
    return !ec;
}

// Older than `stale` by its modification time (an unreadable time counts as old).
bool older_than(const fs::path& p, std::chrono::seconds stale) {
    std::error_code ec;
    const auto t = fs::last_write_time(p, ec);
    if (ec) return true;
    return fs::file_time_type::clock::now() - t > stale;
}

// The lock directory: mkdir is atomic on every POSIX file system, NFS and FUSE ones included.
bool take_lock(const fs::path& root, std::chrono::seconds stale) {
    const auto lock = root / lock_name;
    std::error_code ec;
    if (fs::create_directory(lock, ec) && !ec) return true;
    if (!older_than(lock, stale)) return false;
    // Its holder died (or hangs): taken over. Two that take it over at once may both run; each
    // claims what it evicts by a rename, so nothing is deleted twice.
    fs::remove(lock, ec);
    return fs::create_directory(lock, ec) && !ec;
}

}  // namespace

std::string manifest_name_for(const std::string& key) {
    auto name = file_name_for(key);  // validates the key
    return name.substr(0, name.size() - 4) + ".json";
}

std::string manifest_text(const shared_entry& e) {
    return json{{"key", e.key},
                {"identity", e.identity},
                {"tokens", e.tokens},
                {"bytes", e.bytes},
                {"prefill_seconds", e.prefill_seconds},
                {"hits", e.hits},
                {"created", e.created},
                {"last_used", e.last_used},
                {"publisher", e.publisher},
                {"tenant", e.tenant}}
        .dump(-1, ' ', false, json::error_handler_t::replace);  // never throws on bad UTF-8
}

std::optional<shared_entry> parse_manifest(std::string_view text) {
    if (text.size() > max_manifest_bytes) return std::nullopt;
    const auto j = json::parse(text, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    try {
        shared_entry e;
        e.key = j.at("key").get<std::string>();
        e.identity = j.at("identity").get<std::string>();
        e.tokens = j.at("tokens").get<std::uint64_t>();
        e.bytes = j.at("bytes").get<std::uint64_t>();
        e.prefill_seconds = j.value("prefill_seconds", 0.0);
        e.hits = j.value("hits", std::uint64_t{0});
        e.created = j.value("created", std::int64_t{0});
        e.last_used = j.value("last_used", std::int64_t{0});
        e.publisher = j.value("publisher", std::string());
        e.tenant = j.value("tenant", std::string());  // none before tenants: the default one
        (void)file_name_for(e.key);  // a key that could name another file is refused
        if (e.identity.empty() || e.tokens == 0 || e.bytes == 0 || !(e.prefill_seconds >= 0))
            return std::nullopt;
        return e;
    } catch (const std::exception&) {  // missing fields, wrong types, a bad key
        return std::nullopt;
    }
}

const char* name(publish_result r) noexcept {
    switch (r) {
        case publish_result::published: return "published";
        case publish_result::present: return "present";
        case publish_result::too_big: return "too_big";
        case publish_result::missing: return "missing";
        case publish_result::no_room: return "no_room";
        case publish_result::too_slow: return "too_slow";
        case publish_result::failed: return "failed";
    }
    return "?";
}

publish_result publish_shared(const fs::path& root, const shared_entry& e, const fs::path& source,
                              std::uint64_t budget, std::chrono::steady_clock::time_point deadline,
                              const std::string& tag) {
    if (e.bytes > budget) return publish_result::too_big;
    if (auto there = find_shared(root, e.key, e.identity); there && there->bytes == e.bytes)
        return publish_result::present;
    bring_request r;
    r.source = source;
    r.bytes = e.bytes;
    r.target = root / file_name_for(e.key);
    r.deadline = deadline;
    r.allow_link = false;  // the shared copy must not change when the local file is replaced
    r.tag = tag;
    switch (bring_slot_file(r)) {
        case bring_result::linked:
        case bring_result::copied: break;
        case bring_result::missing: return publish_result::missing;
        case bring_result::no_room: return publish_result::no_room;
        case bring_result::too_slow: return publish_result::too_slow;
        case bring_result::failed: return publish_result::failed;
    }
    return write_manifest(root, e, tag) ? publish_result::published : publish_result::failed;
}

std::optional<shared_entry> find_shared(const fs::path& root, const std::string& key,
                                        const std::string& identity, const std::string* tenant) {
    std::string manifest;
    try {
        manifest = manifest_name_for(key);
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
    const auto text = read_small(root / manifest);
    if (!text) return std::nullopt;
    auto e = parse_manifest(*text);
    if (!e || e->key != key || e->identity != identity) return std::nullopt;
    if (tenant && e->tenant != *tenant) return std::nullopt;
    std::error_code ec;
    const auto size = fs::file_size(root / file_name_for(key), ec);
    if (ec || size != e->bytes) return std::nullopt;
    return e;
}

bring_result fetch_shared(const fs::path& root, const shared_entry& e, const fs::path& target,
                          std::chrono::steady_clock::time_point deadline, std::int64_t now,
                          const std::string& tag) {
    bring_request r;
    r.source = root / file_name_for(e.key);
    r.bytes = e.bytes;
    r.target = target;
    r.deadline = deadline;
    r.allow_link = false;
    r.replace = false;  // the caller stops waiting at the deadline, and its lease ends then
    r.tag = tag;
    const auto result = bring_slot_file(r);
    if (result == bring_result::copied) {
        // Its use makes it worth more to every evictor. Only while it is still listed: an
        // evictor that claimed it meanwhile is not undone by a manifest written back.
        auto used = e;
        used.hits += 1;
        used.last_used = now;
        std::error_code ec;
        if (fs::exists(root / manifest_name_for(e.key), ec)) write_manifest(root, used, tag);
    }
    return result;
}

std::vector<std::string> shared_evictions(const std::vector<shared_entry>& entries,
                                          std::uint64_t budget) {
    // The order of the slot directories' budgets, with every entry one tenant's.
    std::vector<stored_file> files;
    files.reserve(entries.size());
    for (const auto& e : entries)
        files.push_back({e.key, "", e.bytes, e.hits, e.prefill_seconds, e.last_used});
    return tenant_evictions(files, "", budget, {});
}

shared_sweep enforce_shared_budget(const fs::path& root, std::uint64_t budget,
                                   const std::string& tag, std::chrono::seconds stale,
                                   std::size_t max_entries) {
    shared_sweep out;
    if (!take_lock(root, stale)) return out;
    out.ran = true;
    std::map<std::string, fs::path> bins, manifests;  // by key
    std::vector<fs::path> leftovers;                  // temporaries and claims
    std::error_code ec;
    std::size_t seen = 0;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end && seen < max_entries;
         it.increment(ec), ++seen) {
        const auto name = it->path().filename().string();
        // Only plain files are read or counted (the type comes with the listing): a FIFO or a
        // device planted there would block the sweep or feed it without end.
        std::error_code type_ec;
        if (!it->is_regular_file(type_ec) || type_ec) continue;
        if (auto k = key_of(name, ".bin"); !k.empty()) {
            bins[k] = it->path();
        } else if (auto m = key_of(name, ".json"); !m.empty()) {
            manifests[m] = it->path();
        } else if (name.starts_with("ws-") && name.ends_with(".tmp")) {
            leftovers.push_back(it->path());
        } else if (name.starts_with(".ws-") && name.ends_with(".evict")) {
            leftovers.push_back(it->path());
        }
    }
    std::vector<shared_entry> entries;
    for (const auto& [key, path] : manifests) {
        const auto text = read_small(path);
        auto e = text ? parse_manifest(*text) : std::nullopt;
        const auto bin = bins.find(key);
        if (e && e->key == key && bin != bins.end()) {
            const auto size = fs::file_size(bin->second, ec);
            if (!ec && size == e->bytes) {
                entries.push_back(*e);
                out.bytes += e->bytes;
                bins.erase(bin);
                continue;
            }
        }
        // A manifest without its file (evicted under a writer that put it back) or unreadable.
        if (older_than(path, stale) && fs::remove(path, ec)) ++out.cleaned;
    }
    // Slot files without a manifest: a publish under way (its manifest comes next) or dead.
    for (const auto& [key, path] : bins) {
        if (older_than(path, stale) && fs::remove(path, ec)) ++out.cleaned;
    }
    for (const auto& path : leftovers) {
        if (older_than(path, stale) && fs::remove(path, ec)) ++out.cleaned;
    }
    for (const auto& key : shared_evictions(entries, budget)) {
        // The claim: renaming the manifest away succeeds for one evictor only, and from then on
        // no reader finds the entry.
        const auto claim = root / (".ws-" + key + "-" + unique_suffix(tag) + ".evict");
        fs::rename(root / manifest_name_for(key), claim, ec);
        if (ec) continue;  // another evictor has it
        fs::remove(root / file_name_for(key), ec);
        fs::remove(claim, ec);
        out.evicted.push_back(key);
    }
    fs::remove(root / lock_name, ec);
    return out;
}

}  // namespace warmslot::cache
