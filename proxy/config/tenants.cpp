// tenants: what one tenant (the `tenant` of api_keys entries) may take of warmslot at once. The
// keys that name the tenants are read in access.cpp, their disk budgets (cache.tenant_max_disk)
// there too.
#include "config/reader.hpp"

namespace warmslot::config::detail {

tenant_settings reader::read_tenants(const entry& e) const {
    tenant_settings out;
    read_map(e, {{"limits", [&](const entry& l) {
                      read_map(l, {{"concurrent_requests",
                                    [&](const entry& v) {
                                        out.limits.concurrent_requests = read_count(v, 0, 100'000);
                                    }},
                                   {"swaps_per_minute", [&](const entry& v) {
                                        out.limits.swaps_per_minute = read_count(v, 0, 10'000);
                                    }}});
                  }}});
    return out;
}

}  // namespace warmslot::config::detail
