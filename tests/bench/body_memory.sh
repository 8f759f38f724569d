#!/usr/bin/env bash
# The body-memory benchmark: how much memory one large request body costs warmslot, as a
# multiple of the body, on its whole path to an upstream (bench_stub, which answers at once).
#
#   tests/bench/body_memory.sh [--write-doc]
#
# Builds warmslot, bench_stub and bench_body into ${WARMSLOT_BUILD_DIR:-build}. For each body
# shape (one long system message; ~1 KiB messages) and size (BENCH_BODY_MIB: 1 16 64, each
# sent as a body just under that many MiB, so that the id_slot warmslot adds keeps it under
# the stub's 64 MiB limit), it starts a fresh warmslot in front of the stub, sends one small
# request (the backend is checked and the planner has run), resets the process's peak RSS
# (/proc/PID/clear_refs), reads its RSS, sends the large request with bench_body, and reads the
# peak (VmHWM). The cost is peak minus RSS before; each case runs BENCH_BODY_ROUNDS (3) times,
# a fresh process each, and the highest cost is reported. Prints a markdown table; with
# --write-doc it also replaces the section between the body-memory markers in
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

write_doc=0
case ${1:-} in
  --write-doc) write_doc=1 ;;
  "") ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
build=${WARMSLOT_BUILD_DIR:-build}
sizes=${BENCH_BODY_MIB:-1 16 64}
rounds=${BENCH_BODY_ROUNDS:-3}
note() { printf 'body_memory [%3ds]: %s\n' "$SECONDS" "$*" >&2; }

cmake --build "$build" --target warmslot bench_stub bench_body >&2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/warmslot-body.XXXXXX")
running=()
finish() {
  local p
  for p in "${running[@]+"${running[@]}"}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap finish EXIT

# Starts a program whose first matching stdout line names its URL; sets `url` and `pid`.
launch() {
  local name=$1 regex=$2 i
  shift 2
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  running+=("$pid")
  for ((i = 0; i < 400; i++)); do
    url=$(grep -m1 -oE "$regex" "$tmp/$name.out" | grep -oE 'http://[0-9.:]+' || true)
    [ -n "$url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.025
  done
  note "$name did not start:"; cat "$tmp/$name.err" >&2
  exit 1
}
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

launch stub 'listening on http://[0-9.:]+' "$build/tests/bench/bench_stub"
stub_url=$url stub_pid=$pid
cat >"$tmp/warmslot.yaml" <<EOF
listen: 127.0.0.1:0
backends:
  - name: stub
    url: $stub_url
log:
  level: warn
  access: false
EOF

# One measurement: sets m_before and m_peak (KiB), m_sent (the body's bytes) and m_route.
measure() {
  local shape=$1 bytes=$2 line
  launch warmslot '^warmslot listening on http://[0-9.:]+' \
    "$build/proxy/warmslot" --config "$tmp/warmslot.yaml"
  "$build/tests/bench/bench_body" --url "$url" --bytes 8192 --shape "$shape" >/dev/null
  echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || note "cannot reset VmHWM: peaks include start-up"
  m_before=$(status_kib "$pid" VmRSS)
  line=$("$build/tests/bench/bench_body" --url "$url" --bytes "$bytes" --shape "$shape")
  m_peak=$(status_kib "$pid" VmHWM)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  running=("$stub_pid")
  [[ $line == status=200* ]] || { note "$shape $bytes: $line"; exit 1; }
  m_sent=${line#*bytes=}; m_sent=${m_sent%% *}
  m_route=${line##*route=}
}

table() {
  echo "| body | bytes | RSS before MiB | peak RSS MiB | peak - before MiB | x body | route |"
  echo "|---|--:|--:|--:|--:|--:|---|"
  local shape mib r worst before peak sent route
  for shape in system messages; do
    for mib in $sizes; do
      worst=-1
      for ((r = 1; r <= rounds; r++)); do
        note "$shape $mib MiB, round $r/$rounds"
        measure "$shape" $((mib * 1048576 - 4096))
        if ((m_peak - m_before > worst)); then
          worst=$((m_peak - m_before)) before=$m_before peak=$m_peak sent=$m_sent route=$m_route
        fi
      done
      awk -v shape="$shape" -v mib="$mib" -v sent="$sent" -v b="$before" -v p="$peak" -v rt="$route" 'BEGIN {
        name = shape == "system" ? "one system message" : "1 KiB messages"
        printf "| %s, %d MiB | %d | %.1f | %.1f | %.1f | %.2f | %s |\n", name, mib, sent,
               b / 1024, p / 1024, (p - b) / 1024, (p - b) * 1024 / sent, rt }'
    done
  done
}

report() {
  local cpu
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
  echo "Measured $(date -u +%Y-%m-%d) on $(getconf _NPROCESSORS_ONLN) cores (${cpu:-unknown CPU}),"
  echo "Linux $(uname -r), $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt") build;"
  echo "the highest of $rounds rounds, each a fresh warmslot:"
  echo
  table
}

report >"$tmp/report.md"
cat "$tmp/report.md"
if ((write_doc)); then
  awk -v section="$tmp/report.md" '
    /<!-- body-memory:begin -->/ { print; while ((getline l < section) > 0) print l; skip = 1; next }
    /<!-- body-memory:end -->/ { skip = 0 }
    !skip { print }' docs/benchmarks.md >"$tmp/doc.md"
  grep -q '<!-- body-memory:begin -->' docs/benchmarks.md || { note "docs/benchmarks.md has no body-memory markers"; exit 1; }
  cat "$tmp/doc.md" >docs/benchmarks.md
  note "updated docs/benchmarks.md"
fi
