// How a call reaches one model of a llama-server in router mode (config::backend::router_model):
// the router reads the model's id from the query of a GET (`?model=`) and from the JSON body of
// a POST (`"model"`), and loads a model that is not loaded unless the query says
// `autoload=false`. Pure; plain backends' calls pass unchanged.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace warmslot::upstream {

// Whether a call of warmslot's own must not make the router load the model: reads (a check
// must not load what it looks at) and a slot's save or erase (there is nothing to save or erase
// in a model that is not loaded). A restore, a tokenize or a render loads it: the request it
// serves is about to.
bool keeps_unloaded(bool get, std::string_view target);

// `target` with the model's id in its query (when it has none) and, when `no_load`,
// `autoload=false`. Percent-encodes the id.
std::string router_target(const config::backend& b, std::string target, bool no_load);

// The JSON text `"model":"<id>"` to put first in a POST body's object (a `model` the body
// already has comes later and wins: the router resolves a client's own name for the model);
// "" for a plain backend.
std::string router_model_field(const config::backend& b);

// `body` (a JSON object, or "") with router_model_field first in it.
std::string router_body(const config::backend& b, std::string body);

// What a router's GET /models answer says of `model`: its status ("loaded", "loading",
// "unloaded", "sleeping", ...); "" when the list does not have the model (or no status for it);
// std::nullopt when the answer is not such a list.
std::optional<std::string> read_router_state(std::string_view answer, const std::string& model);

}  // namespace warmslot::upstream
