// What the dashboard shows over time: a bounded ring of the last requests (fed where the access
// line is written), per-slot previews of what a request brought to a slot, and a time series of
// 5-second buckets over the last hour. Pure: no Asio, no Beast.
//
// One activity per process, shared by all workers: every public member locks its mutex, so it
// is thread-safe. Memory is bounded: max_requests records, max_previews previews (the oldest
// goes first), buckets of the last hour.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace warmslot::status {

// Milliseconds since the Unix epoch: the clock of the records and of their views.
inline std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Routes as charted: the first word of X-Warmslot-Route.
enum class route_group { hit, miss, scratch, pass_through, other };
inline constexpr std::size_t route_groups = 5;
route_group group_of(std::string_view route) noexcept;
std::string_view name(route_group g) noexcept;

// One finished request, as the access line tells it.
struct request_record {
    std::int64_t at_ms = 0;  // unix milliseconds at the end of the request
    std::string id;
    std::string method;
    std::string path;  // without the query string
    unsigned status = 0;
    std::string backend;
    std::optional<int> slot;
    std::string route;           // X-Warmslot-Route as sent ("" when not routed)
    std::string disk;            // what the disk tier did ("" when nothing)
    std::string rewrites;        // X-Warmslot-Rewrites as sent
    std::optional<long> cached;  // prompt tokens reused (timings.cache_n)
    std::optional<long> processed;
    double prompt_ms = 0;  // the backend's prefill time (timings.prompt_ms)
    double ms = 0;         // the whole request through warmslot
    // Given: the registry's running total of estimated prefill seconds saved when the request
    // ended. record() keeps the increase since the previous record (so concurrent requests may
    // swap their shares; the sum over requests equals the total).
    double saved_seconds = 0;
    std::string error;  // error kind name, "" when none
    bool client_gone = false;
    std::string tenant;  // the caller's tenant ("" the default one): who may see this record
};

// What a request brought to a slot: the first characters of its system prompt or first
// document, or the client's X-Warmslot-Label.
struct slot_preview {
    std::string text;
    bool label = false;  // given by the client
    std::int64_t at_ms = 0;
    std::string tenant;  // whose request brought it: only that tenant (and admins) see it
};

struct bucket {
    std::int64_t start_ms = 0;
    std::uint64_t requests = 0;
    std::uint64_t processed = 0;
    std::uint64_t reused = 0;
    double saved_seconds = 0;
    double prompt_ms_sum = 0;  // over requests with timings
    std::uint64_t timed = 0;
    std::array<std::uint64_t, route_groups> routes{};  // of requests that reached a backend
};

struct disk_counts {
    std::uint64_t restores = 0;
    std::uint64_t restore_failures = 0;
    std::uint64_t snapshots = 0;
};

struct activity_view {
    std::vector<request_record> requests;  // oldest first
    std::vector<bucket> series;            // oldest first, buckets without requests left out
    std::map<std::pair<std::string, int>, slot_preview> previews;  // by (backend, slot)
    disk_counts disk;
};

class activity {
  public:
    static constexpr std::size_t max_requests = 500;
    static constexpr std::size_t max_previews = 4096;
    static constexpr std::int64_t bucket_ms = 5000;
    static constexpr std::int64_t window_ms = 3600 * 1000;

    void record(request_record r);
    void set_preview(const std::string& backend, int slot, slot_preview p);
    // `tenant`: only that tenant's requests and previews; null: everything (an admin's view).
    // The time series and disk counts are for the whole server.
    activity_view view(std::int64_t now_ms, const std::string* tenant = nullptr) const;

  private:
    mutable std::mutex mu_;
    std::deque<request_record> requests_;
    std::deque<bucket> series_;
    std::map<std::pair<std::string, int>, slot_preview> previews_;
    disk_counts disk_;
    double saved_total_ = 0;
};

// The preview of a chat or completion body: the system prompt, else the first user message,
// else the prompt, cut to `max_chars` characters (UTF-8 safe) with whitespace runs folded.
std::string preview_text(std::string_view text, std::size_t max_chars);

}  // namespace warmslot::status
