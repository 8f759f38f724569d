#!/usr/bin/env bash
# Instructions per proxied request: warmslot under callgrind in front of bench_stub, driven by
# bench_load. Instruction counts do not depend on other load on the host, unlike req/s or
# CPU time, so this compares two builds of the request path reliably (the kernel's share of
# the work is not counted).
#
#   tests/bench/instructions.sh [json|sse]...        (default: json sse)
#
# Uses the build in ${WARMSLOT_BUILD_DIR:-build} (warmslot, bench_stub and bench_load must be
# built) and valgrind (apt-get install valgrind). Warms up for BENCH_WARMUP (2) s with 8
# connections, then counts BENCH_DURATION (6) s of requests; prints one line per mode with the
# requests, the instructions and their ratio. The callgrind profile of the counted part stays in
# ${TMPDIR:-/tmp} (callgrind_annotate it to see where the instructions go).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${WARMSLOT_BUILD_DIR:-build}
warmup=${BENCH_WARMUP:-2}
duration=${BENCH_DURATION:-6}
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(json sse)
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 1; }
for bin in proxy/warmslot tests/bench/bench_stub tests/bench/bench_load; do
  [ -x "$build/$bin" ] || { echo "instructions.sh: build $build/$bin first" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/warmslot-instr.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
wait_port() {  # file pid -> port of the "http://127.0.0.1:PORT" it prints
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q 'http://127\.0\.0\.1:' "$1" 2>/dev/null && break
    kill -0 "$2" 2>/dev/null || { echo "instructions.sh: $1: process died" >&2; exit 1; }
    sleep 0.05
  done
  sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$1" | head -n1
}

"$build/tests/bench/bench_stub" >"$tmp/stub.out" 2>/dev/null &
pids+=($!)
stub_port=$(wait_port "$tmp/stub.out" $!)
cat >"$tmp/warmslot.yaml" <<YAML
listen: 127.0.0.1:0
backends:
  - name: stub
    url: http://127.0.0.1:$stub_port
log:
  level: warn
  access: false
YAML
# valgrind 3.19 cannot read clang's debug info: profile a copy without it (symbols stay).
objcopy --strip-debug "$build/proxy/warmslot" "$tmp/warmslot"

for mode in "${modes[@]}"; do
  out_file=${TMPDIR:-/tmp}/warmslot-callgrind.$mode.out
  rm -f "$out_file"*
  : >"$tmp/warmslot.out"  # before the start: wait_port must not read the previous port
  valgrind --tool=callgrind --callgrind-out-file="$out_file" \
    "$tmp/warmslot" --config "$tmp/warmslot.yaml" >"$tmp/warmslot.out" 2>"$tmp/valgrind.err" &
  ws_pid=$!
  pids+=("$ws_pid")
  url=http://127.0.0.1:$(wait_port "$tmp/warmslot.out" "$ws_pid")/v1/chat/completions
  load() { "$build/tests/bench/bench_load" run --url "$url" --mode "$mode" --connections 8 \
             --duration "$1" --warmup 0.1; }
  load "$warmup" >/dev/null
  callgrind_control -z "$ws_pid" >/dev/null 2>&1
  line=$(load "$duration")
  callgrind_control -d "$ws_pid" >/dev/null 2>&1
  kill "$ws_pid"; wait "$ws_pid" 2>/dev/null || true
  requests=$(sed -n 's/.* all_requests=\([0-9]*\).*/\1/p' <<<" $line")
  profile=$out_file.1  # the first dump; the exit writes $out_file itself
  ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$profile")
  echo "$mode: requests=$requests instructions=$ir per_request=$((ir / requests)) profile=$profile"
done
