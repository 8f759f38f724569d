// One request's way to its backend, as the disk tier takes it: the request's worker's connection
// pool and the config snapshot the request took when it arrived. Every call the tier makes for
// the request reads that snapshot, so a reload in the middle of the request does not change what
// it sees (backend names, timeouts, min_prefix_tokens). Work that is no request's (a save
// before a stop, POST /admin/warm, a router making room) passes the config current then.
#pragma once

#include "config/source.hpp"

namespace warmslot::upstream {
class pool;
}

namespace warmslot::tier {

struct request_scope {
    upstream::pool& pool;
    config::snapshot cfg;  // never null
};

}  // namespace warmslot::tier
