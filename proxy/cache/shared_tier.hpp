// The shared tier: slot files published to a directory that several warmslots see, on a shared
// POSIX file system (NFS, CephFS, GlusterFS), so that a prefix computed behind one warmslot is
// restored behind another (another host, after the first one is lost) instead of computed again.
//
// The directory needs no database and no server: each prefix is two files named by its key,
// "ws-<key>.bin" (the slot file as llama-server saved it) and "ws-<key>.json" (its manifest:
// identity, key, tokens, bytes, value). Every write goes to a new file under a random temporary
// name first (created O_EXCL, never through a link: cache/safe_file.hpp) and is renamed into
// place when complete, the slot file before its manifest, and only regular files are read (a
// FIFO or link planted under a name is a miss, never a stalled thread), so a reader that finds a
// manifest finds a complete file, and several warmslots may publish and read at once. Eviction
// (least value per byte) is done by whichever warmslot finds the directory over its budget, one
// at a time (a lock directory, taken over when stale); an evictor claims a manifest by renaming
// it, so two never delete the same entry twice, and a reader whose file vanishes has a miss.
//
// Everything here blocks on the file system, which may be slow or hung: call it from a thread of
// its own, never from an I/O worker, and bound the wait from outside. No Asio here.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/replica_file.hpp"

namespace warmslot::cache {

// One manifest: what a warmslot that finds the file needs to trust it and to judge its worth.
struct shared_entry {
    std::string key;       // the prefix's content address (as in the local index)
    std::string identity;  // the backend identity the file was saved with: only it may load it
    std::uint64_t tokens = 0;
    std::uint64_t bytes = 0;     // the slot file's size
    double prefill_seconds = 0;  // what computing the prefix again costs (the value)
    std::uint64_t hits = 0;      // fetches by any warmslot
    std::int64_t created = 0;    // unix seconds
    std::int64_t last_used = 0;  // unix seconds: published or last fetched
    std::string publisher;       // who published it (host and backend), for people
    std::string tenant;          // whose request saved it ("" the default tenant)
};

inline constexpr std::size_t max_manifest_bytes = 4096;  // larger manifests are not read

// The manifest as stored (one JSON object) and back. parse_manifest refuses text over
// max_manifest_bytes, malformed JSON, a key that file_name_for rejects, and zero sizes.
std::string manifest_text(const shared_entry& e);
std::optional<shared_entry> parse_manifest(std::string_view text);

// "ws-<key>.json", next to file_name_for(key).
std::string manifest_name_for(const std::string& key);

enum class publish_result {
    published,  // copied in and renamed into place
    present,    // already there, same identity and size: left as it is
    too_big,    // larger than the shared budget
    missing,    // the local file is gone or not a slot file of its size
    no_room,    // the shared file system has not room for it and a tenth more
    too_slow,   // the copy did not finish before the deadline; nothing is left behind
    failed,     // the shared directory cannot be written
};
const char* name(publish_result r) noexcept;

// Publishes `e` (its slot file is `source`) into `root`. `tag` makes temporary names unique
// across warmslots (a host name and process id, say).
publish_result publish_shared(const std::filesystem::path& root, const shared_entry& e,
                              const std::filesystem::path& source, std::uint64_t budget,
                              std::chrono::steady_clock::time_point deadline,
                              const std::string& tag);

// The manifest of `key` when it names `identity` (and, when `tenant` is given, that tenant) and
// its slot file is there with the size it says; std::nullopt otherwise (absent, of another
// identity or tenant, half evicted, unreadable).
std::optional<shared_entry> find_shared(const std::filesystem::path& root, const std::string& key,
                                        const std::string& identity,
                                        const std::string* tenant = nullptr);

// Copies the entry's slot file into `target` (a slot directory's "ws-<key>.bin"), always a
// copy: llama-server writes saves into files of this name, and a link would let it write into
// the shared file. Then records the use in the manifest (hits, last_used) if it is still there.
bring_result fetch_shared(const std::filesystem::path& root, const shared_entry& e,
                          const std::filesystem::path& target,
                          std::chrono::steady_clock::time_point deadline, std::int64_t now,
                          const std::string& tag);

// The keys to drop from `entries` so that the rest total at most `budget` bytes, in the order of
// the slot directories' budgets (cache::tenant_evictions): lowest value per byte
// ((hits + 1) * prefill_seconds / bytes) first, then least recently used, then key. Pure.
std::vector<std::string> shared_evictions(const std::vector<shared_entry>& entries,
                                          std::uint64_t budget);

struct shared_sweep {
    bool ran = false;         // false: another warmslot holds the lock
    std::uint64_t bytes = 0;  // bytes of complete entries before eviction
    std::vector<std::string> evicted;
    std::size_t cleaned = 0;  // leftovers removed (temporaries, files without a partner)
};

// Over budget, evicts the least valuable entries (shared_evictions). Also removes what a crash
// or a lost race left behind, when older than `stale`: temporaries, slot files without a
// manifest, manifests without a slot file, old claims. Reads at most `max_entries` names. Takes
// the lock directory ".warmslot-evict.lock" (a lock older than `stale` is taken over); when
// another warmslot holds it, does nothing.
shared_sweep enforce_shared_budget(const std::filesystem::path& root, std::uint64_t budget,
                                   const std::string& tag, std::chrono::seconds stale,
                                   std::size_t max_entries = 200'000);

}  // namespace warmslot::cache
