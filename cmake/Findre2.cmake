# RE2, Google's linear-time regular expression engine: the rewrite rules and their config check.
# Debian 12's libre2-dev ships headers, libre2.so and a pkg-config file but no CMake package;
# a build of RE2 with its own CMake (the Windows prefix) installs one. Either way the result is
# the imported target re2::re2.
if(TARGET re2::re2)
  set(re2_FOUND TRUE)
  return()
endif()
find_package(re2 CONFIG QUIET)
if(re2_FOUND AND TARGET re2::re2)
  return()
endif()
find_path(RE2_INCLUDE_DIR re2/re2.h)
find_library(RE2_LIBRARY NAMES re2)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(re2
  REQUIRED_VARS RE2_LIBRARY RE2_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install libre2-dev (deploy/install-deps.sh)")
if(re2_FOUND)
  add_library(re2::re2 UNKNOWN IMPORTED)
  set_target_properties(re2::re2 PROPERTIES IMPORTED_LOCATION "${RE2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${RE2_INCLUDE_DIR}")
  find_package(Threads REQUIRED)
  set_property(TARGET re2::re2 APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
mark_as_advanced(RE2_INCLUDE_DIR RE2_LIBRARY)
