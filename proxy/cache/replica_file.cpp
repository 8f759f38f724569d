#include "cache/replica_file.hpp"

#include <system_error>
#include <vector>

#include "cache/safe_file.hpp"
#include "cache/slot_file.hpp"

namespace warmslot::cache {
namespace {

namespace fs = std::filesystem;

// "ws-<key>-[<tag>-]<random>.bin.tmp" next to "ws-<key>.bin": unique per attempt (and per
// writer with a tag), so two requests bringing the same file never write into each other's, a
// user of a shared directory cannot plant a link under the name in advance (and the file is
// created with O_EXCL, so a planted one fails the copy), and a leftover matches what index
// open() deletes.
fs::path temporary_for(const fs::path& target, const std::string& tag) {
    const auto middle = tag.empty() ? std::string() : tag + "-";
    return target.parent_path() /
           (target.stem().string() + "-" + middle + random_name_part() + ".bin.tmp");
}

}  // namespace

std::optional<std::size_t> pick_replica_file(const std::vector<replica_offer>& offers,
                                             const std::string& identity, std::uint64_t max_bytes) {
    for (std::size_t i = 0; i < offers.size(); ++i) {
        const auto& row = offers[i].row;
        if (row.identity == identity && row.tokens > 0 && row.bytes > 0 && row.bytes <= max_bytes)
            return i;
    }
    return std::nullopt;
}

bool copy_allowed(std::uint64_t bytes, std::optional<std::uint64_t> free_bytes) {
    if (!free_bytes) return true;
    return *free_bytes > bytes && *free_bytes - bytes >= bytes / 10;
}

const char* name(bring_result r) noexcept {
    switch (r) {
        case bring_result::linked: return "linked";
        case bring_result::copied: return "copied";
        case bring_result::missing: return "missing";
        case bring_result::no_room: return "no_room";
        case bring_result::too_slow: return "too_slow";
        case bring_result::failed: return "failed";
    }
    return "?";
}

namespace {

// Copies the source into `tmp` (removed again when the copy fails): copied, or why not.
bring_result copy_into(const bring_request& r, const fs::path& tmp) {
    std::error_code ec;
    const auto space = fs::space(r.target.parent_path(), ec);
    if (!copy_allowed(r.bytes, ec ? std::nullopt : std::optional(space.available)))
        return bring_result::no_room;
    bool late = false;
    if (copy_regular(r.source, tmp, r.bytes, r.deadline, late)) return bring_result::copied;
    fs::remove(tmp, ec);
    if (late) return bring_result::too_slow;
    // A source that vanished or changed under the copy is a miss, not a broken target.
    return check_slot_file(r.source, r.bytes) == file_state::intact ? bring_result::failed
                                                                    : bring_result::missing;
}

}  // namespace

bring_result bring_slot_file(const bring_request& r) {
    if (check_slot_file(r.source, r.bytes) != file_state::intact) return bring_result::missing;
    std::error_code ec;
    // One directory under two spellings: the file is in place already (a rename onto another
    // name of the same file would do nothing and leave the temporary behind).
    if (fs::equivalent(r.source, r.target, ec) && !ec) return bring_result::linked;
    const auto tmp = temporary_for(r.target, r.tag);
    auto result = bring_result::linked;
    if (r.allow_link) fs::create_hard_link(r.source, tmp, ec);
    if (!r.allow_link || ec) {  // another file system, or one without links: a copy
        result = copy_into(r, tmp);
        if (result != bring_result::copied) return result;
    }
    // The source may have been replaced between the check and the link: judge what was made.
    if (check_slot_file(tmp, r.bytes) != file_state::intact) {
        fs::remove(tmp, ec);
        return bring_result::missing;
    }
    // Never past the deadline (the caller may have given up on the bring and so no longer
    // hold the key's lease), and without `replace` never over a file of that name: a save of
    // the same key may have written and indexed it since.
    if (std::chrono::steady_clock::now() >= r.deadline) {
        fs::remove(tmp, ec);
        return bring_result::too_slow;
    }
    if (r.replace) {
        fs::rename(tmp, r.target, ec);
    } else if (!rename_new(tmp, r.target)) {
        ec = std::make_error_code(std::errc::file_exists);
    }
    if (ec) {
        fs::remove(tmp, ec);
        return bring_result::failed;
    }
    return result;
}

}  // namespace warmslot::cache
