#include "upstream/slot_client.hpp"

#include <nlohmann/json.hpp>

#include "upstream/llama_client.hpp"

namespace warmslot::upstream {

namespace {

call_end as_is(call_end e) { return e; }

}  // namespace

slot_client::slot_client(pool& p, config::snapshot cfg, int backend)
    : pool_(p), cfg_(std::move(cfg)), backend_(static_cast<std::size_t>(backend)) {}

const config::backend& slot_client::backend() const { return cfg_->backends[backend_]; }

template <typename R>
awaitable<R> slot_client::exchange(slot_request r, R (*read)(call_end), connection** in_flight) {
    const auto timeout = timeout_for(r.call, *cfg_);
    auto got = co_await call(pool_, backend(), r.get ? http::verb::get : http::verb::post,
                             std::move(r.target), std::move(r.body), timeout, in_flight);
    call_end e;
    e.answered = !got.ec;
    e.status = got.status;
    e.body = std::move(got.body);
    if (got.ec) e.error = got.ec.message();
    co_return read(std::move(e));
}

// Not coroutines: each builds its request now and hands it to exchange() by value.

awaitable<slot_result<nlohmann::json>> slot_client::slots() {
    return exchange(slots_request(), &read_slots_answer);
}

awaitable<slot_result<std::string>> slot_client::apply_template(const nlohmann::json& chat_body) {
    return exchange(apply_template_request(chat_body), &read_template_answer);
}

awaitable<slot_result<std::vector<int>>> slot_client::tokenize(std::string text) {
    return exchange(tokenize_request(std::move(text)), &read_tokenize_answer);
}

awaitable<slot_result<std::vector<std::vector<int>>>> slot_client::tokenize_parts(
    std::vector<std::string> texts, bool first, bool parse_special) {
    auto r = co_await exchange(tokenize_parts_request(texts, first, parse_special),
                               &read_tokenize_parts_answer);
    if (r.value) {
        auto& groups = *r.value;
        // Without `first` the answer begins with a separator: an empty group before the texts.
        if (!first && !groups.empty() && groups.front().empty()) groups.erase(groups.begin());
        if (groups.size() != texts.size()) r.value.reset();
    }
    co_return r;
}

awaitable<slot_result<saved>> slot_client::save(int slot, const std::string& file) {
    return exchange(save_request(slot, file), &read_save_answer);
}

awaitable<slot_result<restored>> slot_client::restore(int slot, const std::string& file) {
    return exchange(restore_request(slot, file), &read_restore_answer);
}

awaitable<call_end> slot_client::erase(int slot) { return exchange(erase_request(slot), &as_is); }

awaitable<slot_result<api::prompt_stats>> slot_client::prime(int slot,
                                                             const std::vector<int>& tokens,
                                                             connection** in_flight) {
    return exchange(prime_request(slot, tokens), &read_prime_answer, in_flight);
}

}  // namespace warmslot::upstream
