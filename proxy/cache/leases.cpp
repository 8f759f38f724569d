#include "cache/leases.hpp"

namespace warmslot::cache {

key_leases::lease& key_leases::lease::operator=(lease&& o) noexcept {
    if (this != &o) {
        release();
        owner_ = o.owner_;
        key_ = std::move(o.key_);
        o.owner_ = nullptr;
    }
    return *this;
}

void key_leases::lease::release() {
    if (owner_ == nullptr) return;
    owner_->end(key_);
    owner_ = nullptr;
}

key_leases::lease key_leases::take(const std::string& key) {
    std::lock_guard lock(mu_);
    ++counts_[key];
    return lease(this, key);
}

std::optional<key_leases::lease> key_leases::take_exclusive(const std::string& key) {
    std::lock_guard lock(mu_);
    auto& n = counts_[key];
    if (n > 0) return std::nullopt;
    n = 1;
    return lease(this, key);
}

std::size_t key_leases::count(const std::string& key) const {
    std::lock_guard lock(mu_);
    const auto it = counts_.find(key);
    return it == counts_.end() ? 0 : it->second;
}

std::vector<std::string> key_leases::held() const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    out.reserve(counts_.size());
    for (const auto& [key, n] : counts_) {
        if (n > 0) out.push_back(key);
    }
    return out;
}

void key_leases::end(const std::string& key) {
    std::lock_guard lock(mu_);
    const auto it = counts_.find(key);
    if (it == counts_.end()) return;
    if (--it->second == 0) counts_.erase(it);
}

}  // namespace warmslot::cache
