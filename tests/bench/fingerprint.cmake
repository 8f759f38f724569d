# Fingerprinting and token-chain hashing cost on large inputs (pure code, no sockets). Include this file from a
# CMakeLists.txt in the same project as proxy/ (it needs the warmslot_routing and warmslot_cache targets); paths are
# relative to this file, so it works from tests/ or tests/bench/.
#   fingerprint_bench [runs=200]   prints a markdown table
add_executable(fingerprint_bench ${CMAKE_CURRENT_LIST_DIR}/fingerprint_bench.cpp)
target_link_libraries(fingerprint_bench PRIVATE warmslot_routing warmslot_cache warmslot_warnings)
