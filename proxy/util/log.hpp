// One named spdlog logger per module. app/ registers them with its sinks at start-up; before
// that (tests), a module's logger is a clone of the default one.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

namespace warmslot::util {

inline std::shared_ptr<spdlog::logger> module_logger(const char* name) {
    auto l = spdlog::get(name);
    return l ? l : spdlog::default_logger()->clone(name);
}

}  // namespace warmslot::util
