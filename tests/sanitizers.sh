#!/usr/bin/env bash
# The sanitizer and fuzzing step of tests/run-all.sh (see docs/testing.md). In one build
# directory (build-asan, or WARMSLOT_ASAN_BUILD_DIR), with clang, ASan and UBSan on every object:
#   1. builds the unit and component tests and every libFuzzer target (fuzz_targets);
#   2. runs the unit and component tests: any sanitizer report fails them;
#   3. runs each executable named *_fuzz for WARMSLOT_FUZZ_SECONDS (default 10) seconds over its
#      seeds (tests/fuzz/seeds/<name>/, read only) and the corpus earlier runs grew
#      (<build>/fuzz/corpus/<name>/), with tests/fuzz/<name>.dict when there is one.
# A crash, a leak, a timeout or a broken property fails the step; its input is left in
# <build>/fuzz/crashes/ (replay: <build>/.../<name>_fuzz <that file>).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${WARMSLOT_ASAN_BUILD_DIR:-build-asan}
seconds=${WARMSLOT_FUZZ_SECONDS:-10}
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
# -O1 with line tables: reports name file and line, and compiling takes about half as long as
# RelWithDebInfo's -O2 -g. Assertions stay on.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DWARMSLOT_WERROR=ON \
  -DWARMSLOT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
nice cmake --build "$build" -j"$(nproc)" --target unit_tests component_tests fuzz_targets

symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
[ -z "$symbolizer" ] || export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$build/tests/unit_tests"
"$build/tests/component_tests"

crashes="$build/fuzz/crashes"
mkdir -p "$crashes"
mapfile -t targets < <(find "$build" -path '*/CMakeFiles' -prune -o -type f -perm -u+x \
  -name '*_fuzz' -print | sort)
[ ${#targets[@]} -gt 0 ] || { echo "sanitizers.sh: no fuzz targets in $build" >&2; exit 1; }
failed=0
for exe in "${targets[@]}"; do
  name=$(basename "$exe" _fuzz)
  corpus="$build/fuzz/corpus/$name"
  mkdir -p "$corpus"
  args=(-max_total_time="$seconds" -max_len=1048576 -timeout=30 -rss_limit_mb=2048
    -artifact_prefix="$crashes/$name-" -print_final_stats=1)
  [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
  dirs=("$corpus")
  [ -d "tests/fuzz/seeds/$name" ] && dirs+=("tests/fuzz/seeds/$name")
  log="$build/fuzz/$name.log"
  if "$exe" "${args[@]}" "${dirs[@]}" >"$log" 2>&1; then
    echo "fuzz $name: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs, no crash"
  else
    echo "fuzz $name: FAILED (log: $log)" >&2
    tail -n 40 "$log" >&2
    failed=1
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "sanitizers.sh: reproducers in $crashes:" >&2
  ls -l "$crashes" >&2
  exit 1
fi
