#include "rewrite/memory.hpp"

#include <algorithm>
#include <tuple>

namespace warmslot::rewrite {
namespace {

constexpr std::uint64_t entry_overhead = 64;

std::uint64_t cost(const stored_document& d) {
    return d.text.size() + d.id.size() + d.chunks.size() * (sizeof(chunk) + 8) + entry_overhead;
}
std::uint64_t cost(const std::vector<std::uint64_t>& order) {
    return order.size() * 8 + entry_overhead;
}
std::uint64_t cost(const std::string& note) { return note.size() + entry_overhead; }

}  // namespace

bool memory::knows(std::uint64_t document_hash) const {
    std::lock_guard lock(mu_);
    const auto it = docs_.find(document_hash);
    if (it == docs_.end()) return false;
    it->second.used = tick_locked();
    return true;
}

std::shared_ptr<const stored_document> memory::by_id(const std::string& id) const {
    std::lock_guard lock(mu_);
    std::shared_ptr<const stored_document> best;
    std::uint64_t best_used = 0;
    for (auto& [hash, e] : docs_) {
        if (e.doc->id == id && e.used >= best_used) {
            best = e.doc;
            best_used = e.used;
        }
    }
    return best;
}

std::shared_ptr<const stored_document> memory::most_similar(const std::vector<chunk>& chunks,
                                                            std::uint64_t bytes,
                                                            double threshold) const {
    std::lock_guard lock(mu_);
    doc_entry* best = nullptr;
    double best_score = threshold;
    for (auto& [hash, e] : docs_) {
        const auto size = e.doc->text.size();
        const auto smaller = static_cast<double>(std::min<std::uint64_t>(size, bytes));
        const auto larger = static_cast<double>(std::max<std::uint64_t>(size, bytes));
        if (larger == 0 || smaller / larger < threshold) continue;  // cannot reach it
        const double score = similarity(chunks, bytes, e.doc->sorted, size);
        if (score >= best_score) {
            best_score = score;
            best = &e;
        }
    }
    if (best == nullptr) return nullptr;
    best->used = tick_locked();
    return best->doc;
}

std::optional<std::vector<std::uint64_t>> memory::order(std::uint64_t prefix_key) const {
    std::lock_guard lock(mu_);
    const auto it = orders_.find(prefix_key);
    if (it == orders_.end()) return std::nullopt;
    it->second.used = tick_locked();
    return it->second.value;
}

std::optional<std::string> memory::note(std::uint64_t turn_key) const {
    std::lock_guard lock(mu_);
    const auto it = notes_.find(turn_key);
    if (it == notes_.end()) return std::nullopt;
    it->second.used = tick_locked();
    return it->second.value;
}

void memory::remember(const memory_update& u) {
    // Chunking is the costly part: done before taking the lock.
    std::vector<std::shared_ptr<stored_document>> fresh;
    for (const auto& d : u.documents) {
        auto doc = std::make_shared<stored_document>();
        doc->text = d.text;
        doc->hash = hash_text(d.text);
        doc->id = d.id;
        fresh.push_back(std::move(doc));
    }
    std::vector<std::shared_ptr<stored_document>> to_chunk;
    {
        std::lock_guard lock(mu_);
        for (auto& doc : fresh) {
            if (auto it = docs_.find(doc->hash); it != docs_.end())
                it->second.used = tick_locked();
            else
                to_chunk.push_back(doc);
        }
    }
    for (auto& doc : to_chunk) {
        doc->chunks = content_chunks(doc->text);
        doc->sorted = sorted_hashes(doc->chunks);
    }
    std::lock_guard lock(mu_);
    for (auto& doc : to_chunk) {
        if (cost(*doc) > max_bytes_ || docs_.contains(doc->hash)) continue;
        bytes_ += cost(*doc);
        const auto hash = doc->hash;
        docs_[hash] = doc_entry{std::move(doc), tick_locked()};
    }
    for (const auto& [key, order] : u.orders) {
        auto [it, inserted] = orders_.try_emplace(key);
        if (!inserted) bytes_ -= cost(it->second.value);
        bytes_ += cost(order);
        it->second = {order, tick_locked()};
    }
    for (const auto& [key, text] : u.notes) {
        auto [it, inserted] = notes_.try_emplace(key);
        if (!inserted) bytes_ -= cost(it->second.value);
        bytes_ += cost(text);
        it->second = {text, tick_locked()};
    }
    evict_locked();
}

// Drops the least recently used entries of any kind until 90% of the budget is left.
void memory::evict_locked() {
    if (bytes_ <= max_bytes_) return;
    enum class kind { doc, order, note };
    std::vector<std::tuple<std::uint64_t, kind, std::uint64_t>> all;
    for (const auto& [k, e] : docs_) all.emplace_back(e.used, kind::doc, k);
    for (const auto& [k, e] : orders_) all.emplace_back(e.used, kind::order, k);
    for (const auto& [k, e] : notes_) all.emplace_back(e.used, kind::note, k);
    std::sort(all.begin(), all.end());
    const std::uint64_t target = max_bytes_ - max_bytes_ / 10;
    for (const auto& [used, what, key] : all) {
        if (bytes_ <= target) break;
        if (what == kind::doc) {
            bytes_ -= cost(*docs_[key].doc);
            docs_.erase(key);
        } else if (what == kind::order) {
            bytes_ -= cost(orders_[key].value);
            orders_.erase(key);
        } else {
            bytes_ -= cost(notes_[key].value);
            notes_.erase(key);
        }
    }
}

std::uint64_t memory::bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
}

std::size_t memory::documents() const {
    std::lock_guard lock(mu_);
    return docs_.size();
}

}  // namespace warmslot::rewrite
