#!/usr/bin/env bash
# The overhead benchmark: what warmslot adds in front of an upstream that answers at once,
# side by side with direct access and with nginx as a reverse proxy, in one run.
#
#   tests/bench/overhead.sh [--write-doc]
#
# Builds warmslot, bench_stub and bench_load into ${WARMSLOT_BUILD_DIR:-build} (configuring a
# Release build there if none exists), then measures, for non-streaming JSON and for SSE:
#   latency     BENCH_LAT_CONNS (8) keep-alive connections paced at BENCH_LAT_RATE (1000) req/s
#               in total, well below saturation, so p50/p99 show the per-request cost;
#   throughput  BENCH_TPUT_CONNS (64) connections back to back, saturating the machine;
# and the RSS of warmslot (and of nginx's workers) with BENCH_STREAMS (1000) open SSE streams.
# Each measurement is BENCH_WARMUP (0.5) + BENCH_DURATION (2) seconds, repeated BENCH_ROUNDS (3)
# times with the targets in alternating order; the best round of each target is reported.
# Prints a markdown report on stdout (progress on stderr). Targets get PASS/FAIL but the exit
# status only reflects whether the benchmark itself could run. With --write-doc the report
# also replaces the section between the overhead markers in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

write_doc=0
for arg in "$@"; do
  case $arg in
    --write-doc) write_doc=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "overhead.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

build=${WARMSLOT_BUILD_DIR:-build}
duration=${BENCH_DURATION:-2}
warmup=${BENCH_WARMUP:-0.5}
rounds=${BENCH_ROUNDS:-3}
lat_conns=${BENCH_LAT_CONNS:-8}
lat_rate=${BENCH_LAT_RATE:-1000}
tput_conns=${BENCH_TPUT_CONNS:-64}
streams=${BENCH_STREAMS:-1000}
nginx_bin=${NGINX:-/usr/sbin/nginx}

say() { printf "overhead [%3ds]: %s\n" "$SECONDS" "$*" >&2; }
die() { say "$*"; exit 1; }

# ---- build --------------------------------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  say "configuring a Release build in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
[ -d "$build/tests/bench" ] || cmake -S . -B "$build" >&2  # configured before bench existed
[ -d "$build/tests/bench" ] ||
  die "$build has no bench targets: tests/CMakeLists.txt needs add_subdirectory(bench) (and WARMSLOT_TESTS=ON)"
cmake --build "$build" -j "$(nproc)" --target warmslot bench_stub bench_load >&2 || die "build failed"
warmslot_bin=$build/proxy/warmslot
stub_bin=$build/tests/bench/bench_stub
load_bin=$build/tests/bench/bench_load
[ -x "$nginx_bin" ] || die "nginx not found at $nginx_bin (apt-get install nginx-light, or set NGINX)"
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")

# warmslot runs min(hardware threads, 4) workers (proxy/app/app.cpp); nginx gets as many.
cpus=$(getconf _NPROCESSORS_ONLN)
workers=$(( cpus < 1 ? 1 : (cpus > 4 ? 4 : cpus) ))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true  # 1,000 streams: two descriptors each in a proxy

# ---- processes ----------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/warmslot-bench.XXXXXX")
pids=()
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }
stop_pid() {  # TERM, wait up to 5 s, then KILL; always reaps
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.05; done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  local rest=() p
  for p in "${pids[@]}"; do [ "$p" = "$pid" ] || rest+=("$p"); done
  pids=("${rest[@]+"${rest[@]}"}")
}
cleanup() {
  local status=$?
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do stop_pid "$p"; done
  if ((status != 0)) && [ -d "$tmp" ]; then
    for p in "$tmp"/*.err "$tmp"/nginx-*/error.log; do
      [ -s "$p" ] && { say "--- $p"; tail -n 20 "$p" >&2; }
    done
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits until FILE has a line matching REGEX (prints it) while PID lives, for up to 15 s.
wait_line() {
  local file=$1 regex=$2 pid=$3 i line
  for ((i = 0; i < 300; i++)); do
    line=$(grep -m1 -E "$regex" "$file" 2>/dev/null || true)
    [ -n "$line" ] && { echo "$line"; return 0; }
    alive "$pid" || return 1
    sleep 0.05
  done
  return 1
}
port_of() { sed -n 's|.*http://127\.0\.0\.1:\([0-9]*\).*|\1|p' <<<"$1"; }
kib() { awk -v k="$2" '$1 == k":" { print $2; exit }' "/proc/$1/status" 2>/dev/null || echo 0; }
# VmRSS or VmHWM of warmslot, or summed over nginx's worker processes, in KiB.
mem_kib() {
  local kind=$1 pid=$2 key=$3 sum=0 w
  if [ "$kind" = warmslot ]; then kib "$pid" "$key"; return; fi
  for w in $(pgrep -P "$pid"); do sum=$((sum + $(kib "$w" "$key"))); done
  echo "$sum"
}

# CPU time used so far by warmslot, or by nginx's workers, in clock ticks.
cpu_ticks() {
  local kind=$1 pid=$2 sum=0 p t
  local list=$pid
  [ "$kind" = nginx ] && list=$(pgrep -P "$pid")
  for p in $list; do
    t=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{ print $12 + $13 }') || t=0
    sum=$((sum + ${t:-0}))
  done
  echo "$sum"
}
clk_tck=$(getconf CLK_TCK)

start_stub() {
  "$stub_bin" >"$tmp/stub.out" 2>"$tmp/stub.err" &
  stub_pid=$!; pids+=("$stub_pid")
  local line; line=$(wait_line "$tmp/stub.out" 'listening on' "$stub_pid") || die "bench_stub did not start"
  stub_port=$(port_of "$line")
  json_bytes=$(sed -n 's/.*json body \([0-9]*\) bytes.*/\1/p' <<<"$line")
  sse_bytes=$(sed -n 's/.*sse body \([0-9]*\) bytes.*/\1/p' <<<"$line")
}

start_warmslot() {  # sets proxy_pid, proxy_port
  local cfg=$tmp/warmslot.yaml
  cat >"$cfg" <<EOF
listen: 127.0.0.1:0
backends:
  - name: stub
    url: http://127.0.0.1:$stub_port
timeouts:
  shutdown_grace: 1s
log:
  level: warn
  access: false
EOF
  : >"$tmp/warmslot.out"
  "$warmslot_bin" --config "$cfg" >"$tmp/warmslot.out" 2>>"$tmp/warmslot.err" &
  proxy_pid=$!; pids+=("$proxy_pid")
  local line; line=$(wait_line "$tmp/warmslot.out" '^warmslot listening on' "$proxy_pid") ||
    die "warmslot did not start"
  proxy_port=$(port_of "$line")
}

start_nginx() {  # $1: on|off (proxy_buffering); sets proxy_pid, proxy_port
  local buffering=$1 attempt dir i
  for attempt in 1 2 3; do  # the free port may be taken before nginx binds it
    proxy_port=$("$load_bin" free-port)
    dir=$tmp/nginx-$buffering-$attempt
    mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<EOF
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile 8192;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/client_body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  keepalive_requests 1000000;
  upstream stub {
    server 127.0.0.1:$stub_port;
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$proxy_port;
    location / {
      proxy_pass http://stub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering $buffering;
    }
  }
}
EOF
    "$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' 2>>"$tmp/nginx.err" &
    proxy_pid=$!; pids+=("$proxy_pid")
    for ((i = 0; i < 200; i++)); do
      alive "$proxy_pid" || break
      if (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null &&
         (( $(pgrep -c -P "$proxy_pid" || true) >= workers )); then
        return 0
      fi
      sleep 0.05
    done
    stop_pid "$proxy_pid"
  done
  die "nginx did not start"
}

# ---- measuring ----------------------------------------------------------------------------
declare -A res  # res[mode,target,phase] = bench_load's key=value line of the best round
declare -A errs # errs[mode,target] = failed requests over all rounds
declare -A mem  # mem[mode,target] = "rss_kib hwm_kib"
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }

load_run() {  # url mode connections rate -> key=value line on stdout
  local out
  out=$("$load_bin" run --url "$1/v1/chat/completions" --mode "$2" --connections "$3" \
        --rate "$4" --duration "$duration" --warmup "$warmup" 2>>"$tmp/load.err") ||
    die "bench_load failed against $1"
  echo "$out"
}

measure_mode() {  # json|sse
  local mode=$1 buffering=on r target phase line best key ws_pid ws_port ng_pid ng_port
  [ "$mode" = sse ] && buffering=off
  start_warmslot; ws_pid=$proxy_pid; ws_port=$proxy_port
  start_nginx "$buffering"; ng_pid=$proxy_pid; ng_port=$proxy_port
  declare -A url=([direct]="http://127.0.0.1:$stub_port" [warmslot]="http://127.0.0.1:$ws_port"
                  [nginx]="http://127.0.0.1:$ng_port")
  declare -A proxy_of=([direct]="" [warmslot]="$ws_pid" [nginx]="$ng_pid")
  for target in direct warmslot nginx; do errs[$mode,$target]=0; done
  for ((r = 1; r <= rounds; r++)); do
    local order="direct warmslot nginx"
    ((r % 2 == 0)) && order="nginx warmslot direct"
    for phase in latency throughput; do
      for target in $order; do
        say "$mode $phase round $r/$rounds: $target"
        if [ "$phase" = latency ]; then
          line=$(load_run "${url[$target]}" "$mode" "$lat_conns" "$lat_rate")
        else
          local pid=${proxy_of[$target]} cpu0=0 cpu1=0
          [ -n "$pid" ] && cpu0=$(cpu_ticks "$target" "$pid")
          line=$(load_run "${url[$target]}" "$mode" "$tput_conns" 0)
          [ -n "$pid" ] && cpu1=$(cpu_ticks "$target" "$pid")
          line="$line cpu_us=$(awk -v t=$((cpu1 - cpu0)) -v hz="$clk_tck" -v n="$(field "$line" all_requests)" \
                                 'BEGIN { printf "%.1f", n ? t * 1e6 / hz / n : 0 }')"
        fi
        errs[$mode,$target]=$(( ${errs[$mode,$target]} + $(field "$line" errors) ))
        key=$mode,$target,$phase
        best=${res[$key]:-}
        if [ -z "$best" ] ||
           { [ "$phase" = latency ] && awk -v a="$(field "$line" p50_us)" -v b="$(field "$best" p50_us)" 'BEGIN { exit !(a < b) }'; } ||
           { [ "$phase" = throughput ] && awk -v a="$(field "$line" rps)" -v b="$(field "$best" rps)" 'BEGIN { exit !(a > b) }'; }; then
          res[$key]=$line
        fi
      done
    done
  done
  mem[$mode,warmslot]="$(mem_kib warmslot "$ws_pid" VmRSS) $(mem_kib warmslot "$ws_pid" VmHWM)"
  mem[$mode,nginx]="$(mem_kib nginx "$ng_pid" VmRSS) $(mem_kib nginx "$ng_pid" VmHWM)"
  alive "$ws_pid" || die "warmslot died during the $mode runs"
  stop_pid "$ws_pid"; stop_pid "$ng_pid"
}

declare -A held  # held[target] = "idle_kib ready_kib steady_kib hwm_kib ready_ms", or "failed: why"
measure_streams() {  # warmslot|nginx
  local target=$1 line="" idle ready_kib ready_ms steady
  if [ "$target" = warmslot ]; then start_warmslot; else start_nginx off; fi
  idle=$(mem_kib "$target" "$proxy_pid" VmRSS)
  say "$streams open SSE streams through $target"
  coproc LOAD { exec "$load_bin" streams --url "http://127.0.0.1:$proxy_port/v1/chat/completions" \
                  --connections "$streams" --timeout 30 2>>"$tmp/load.err"; }
  local load_pid=$LOAD_PID in=${LOAD[0]} out=${LOAD[1]}
  pids+=("$load_pid")
  held[$target]="failed: no answer from bench_load"
  if read -r -t 40 -u "$in" line && [[ $line == ready* ]]; then
    ready_kib=$(mem_kib "$target" "$proxy_pid" VmRSS)
    ready_ms=$(field "$line" ms)
    if read -r -t 40 -u "$in" line && [[ $line == steady* ]]; then
      steady=$(mem_kib "$target" "$proxy_pid" VmRSS)
      held[$target]="$idle $ready_kib $steady $(mem_kib "$target" "$proxy_pid" VmHWM) $ready_ms"
    fi
  fi
  [[ ${held[$target]} == failed* && -n $line ]] && held[$target]="failed: $line"
  if alive "$load_pid"; then
    { echo stop >&"$out"; } 2>/dev/null || true
    read -r -t 40 -u "$in" line || true
  fi
  [[ $line == done*errors=0 ]] || say "streams via $target: $line"
  stop_pid "$load_pid"
  alive "$proxy_pid" || held[$target]="failed: $target died while holding the streams"
  stop_pid "$proxy_pid"
}

start_stub
measure_mode json
measure_mode sse
measure_streams warmslot
measure_streams nginx
stop_pid "$stub_pid"

# ---- report -------------------------------------------------------------------------------
ms() { awk -v v="$1" 'BEGIN { printf "%.3f", v / 1000 }'; }
mib() { awk -v v="$1" 'BEGIN { printf "%.1f", v / 1024 }'; }
verdict() { awk -v c="$1" 'BEGIN { print (c ? "PASS" : "FAIL") }'; }

mode_table() {  # json|sse
  local mode=$1 t lat tput d_lat n_rps rss
  d_lat=${res[$mode,direct,latency]}
  n_rps=$(field "${res[$mode,nginx,throughput]}" rps)
  echo "| target | req/s @$tput_conns | vs nginx | p50 ms | p99 ms | added p50 ms | added p99 ms | p50 / p99 ms @$tput_conns | proxy CPU µs/req | RSS MiB (peak) | errors |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
  for t in direct warmslot nginx; do
    lat=${res[$mode,$t,latency]}; tput=${res[$mode,$t,throughput]}
    local name=$t added50="–" added99="–" rss="–" cpu="–"
    [ "$t" = nginx ] && name="nginx ($workers workers)"
    [ "$t" = warmslot ] && name="warmslot ($workers workers)"
    if [ "$t" != direct ]; then
      added50=$(awk -v a="$(field "$lat" p50_us)" -v b="$(field "$d_lat" p50_us)" 'BEGIN { printf "%+.3f", (a - b) / 1000 }')
      added99=$(awk -v a="$(field "$lat" p99_us)" -v b="$(field "$d_lat" p99_us)" 'BEGIN { printf "%+.3f", (a - b) / 1000 }')
      read -r r h <<<"${mem[$mode,$t]}"
      rss="$(mib "$r") ($(mib "$h"))"
      cpu=$(field "$tput" cpu_us)
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n' "$name" \
      "$(field "$tput" rps)" "$(awk -v a="$(field "$tput" rps)" -v b="$n_rps" 'BEGIN { printf "%.2fx", a / b }')" \
      "$(ms "$(field "$lat" p50_us)")" "$(ms "$(field "$lat" p99_us)")" "$added50" "$added99" \
      "$(ms "$(field "$tput" p50_us)")" "$(ms "$(field "$tput" p99_us)")" "$cpu" "$rss" "${errs[$mode,$t]}"
  done
}

routes_line() {  # what warmslot's router did with the requests of the reported runs
  local mode=$1 lat tput
  lat=$(field "${res[$mode,warmslot,latency]}" routes | sed 's/:/ /g; s/,/, /g')
  tput=$(field "${res[$mode,warmslot,throughput]}" routes | sed 's/:/ /g; s/,/, /g')
  echo "warmslot's routes (X-Warmslot-Route): ${lat:--} in the latency run; ${tput:--} at $tput_conns connections."
}

report() {
  local cpu; cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
  echo "- Machine: $cpus cores (${cpu:-unknown CPU}), Linux $(uname -r), measured $(date -u +%Y-%m-%d)."
  echo "  warmslot $build_type build with $workers workers; $("$nginx_bin" -v 2>&1 | sed 's|.*nginx/|nginx |') with $workers worker processes."
  echo "  Stub, proxies and load generator all on 127.0.0.1 of this machine."
  echo "- Upstream: bench_stub answers at once. It answers /props and /slots like a llama-server with"
  echo "  4 slots that keep their prompts, so warmslot routes as in production (default config; log"
  echo "  level warn, no access log). nginx: keepalive 64 to the upstream, access log off."
  echo "- Requests: small chat completions sharing a system prompt, each with its own numbered user"
  echo "  message."
  echo "- Latency: $lat_conns keep-alive connections paced at $lat_rate req/s in total (well below"
  echo "  saturation), from writing the request to reading the whole response. Added latency is"
  echo "  relative to direct access."
  echo "- Throughput: $tput_conns keep-alive connections back to back; the same run gives the latency"
  echo "  under saturation (@$tput_conns) and the proxy's CPU time (user + system of warmslot, or of"
  echo "  nginx's workers) per request, which other load on the host disturbs less than req/s."
  echo "- RSS: the same processes after the runs of a table; peak is VmHWM."
  echo "- Each run is ${duration} s after ${warmup} s of warm-up; best of $rounds rounds, targets in"
  echo "  alternating order."
  echo
  echo "**Non-streaming JSON** (a ${json_bytes}-byte chat.completion body):"
  echo
  mode_table json
  echo
  routes_line json
  echo
  echo "**SSE** (chunked text/event-stream, $sse_bytes bytes: 10 chat.completion.chunk events, then"
  echo "\`data: [DONE]\`, sent at once; then the stub closes the connection, as llama-server does after"
  echo "an answer in chunks, so every proxy opens a new upstream connection per stream):"
  echo
  mode_table sse
  echo
  routes_line sse
  echo
  echo "**$streams concurrent open SSE streams** (the stub sends one event per second on each; RSS read"
  echo "when every stream has received its first event, and again after each has received 3):"
  echo
  echo "| proxy | RSS idle MiB | RSS, all open MiB | RSS after 3 events MiB | peak (VmHWM) MiB | per stream KiB | all open after |"
  echo "|---|--:|--:|--:|--:|--:|--:|"
  local t name idle ready steady hwm ready_ms
  for t in warmslot nginx; do
    name="$t ($workers workers)"
    if [[ ${held[$t]} == failed* ]]; then
      echo "| $name | ${held[$t]} | | | | | |"
      continue
    fi
    read -r idle ready steady hwm ready_ms <<<"${held[$t]}"
    printf '| %s | %s | %s | %s | %s | %s | %s ms |\n' "$name" "$(mib "$idle")" "$(mib "$ready")" \
      "$(mib "$steady")" "$(mib "$hwm")" \
      "$(awk -v a="$ready" -v b="$idle" -v n="$streams" 'BEGIN { printf "%.1f", (a - b) / n }')" "$ready_ms"
  done
  echo
  echo "**Targets** (reported, not enforced):"
  echo
  echo "| target | measured | result |"
  echo "|---|--:|---|"
  local mode added ratio
  for mode in json sse; do
    added=$(awk -v a="$(field "${res[$mode,warmslot,latency]}" p50_us)" -v b="$(field "${res[$mode,direct,latency]}" p50_us)" 'BEGIN { printf "%.3f", (a - b) / 1000 }')
    echo "| added p50 latency ≤ 0.2 ms, ${mode^^} | $added ms | $(verdict "$(awk -v a="$added" 'BEGIN { print (a <= 0.2) }')") |"
  done
  for mode in json sse; do
    ratio=$(awk -v a="$(field "${res[$mode,warmslot,throughput]}" rps)" -v b="$(field "${res[$mode,nginx,throughput]}" rps)" 'BEGIN { printf "%.2f", a / b }')
    echo "| throughput ≥ 0.8x nginx, ${mode^^} | ${ratio}x | $(verdict "$(awk -v a="$ratio" 'BEGIN { print (a >= 0.8) }')") |"
  done
  if [[ ${held[warmslot]} == failed* ]]; then
    echo "| RSS ≤ 64 MiB with $streams streams (peak) | ${held[warmslot]} | FAIL |"
  else
    read -r idle ready steady hwm ready_ms <<<"${held[warmslot]}"
    echo "| RSS ≤ 64 MiB with $streams streams (peak) | $(mib "$hwm") MiB | $(verdict "$(awk -v a="$hwm" 'BEGIN { print (a <= 64 * 1024) }')") |"
  fi
  echo
  echo "The machine has $cpus cores and is shared: the stub, the proxy and the load generator compete"
  echo "for them, and other work on the host adds noise. Compare the ratios within one run (all three"
  echo "targets were measured side by side), not absolute numbers across runs or machines."
}

report >"$tmp/report.md"
cat "$tmp/report.md"
for f in load warmslot nginx; do
  [ -s "$tmp/$f.err" ] && { say "stderr of $f:"; sort "$tmp/$f.err" | uniq -c | sort -rn | head -n 20 >&2; }
done

if ((write_doc)); then
  doc=docs/benchmarks.md
  if [ ! -f "$doc" ]; then
    cat >"$doc" <<'EOF'
# Benchmarks

Numbers that describe what warmslot costs, each with the command that produced it. Rerun the
command to refresh a section; the text between its markers is generated.

## Proxy overhead

What warmslot adds to a request compared with talking to the upstream directly, and compared
with nginx as a reverse proxy in front of the same upstream. The upstream is a stub
(`tests/bench/stub_upstream.cpp`) that answers at once, so only the proxies' own cost shows; the
load generator (`tests/bench/load.cpp`) measures all three targets with the same client code.

```
tests/bench/overhead.sh --write-doc
```

Without `--write-doc` it only prints the section below. It takes about 100 s after the build; the
`BENCH_*` variables in the script's header change durations, rounds and connection counts.

<!-- overhead:begin -->
<!-- overhead:end -->
EOF
  elif ! grep -q '<!-- overhead:begin -->' "$doc"; then
    printf '\n## Proxy overhead\n\n```\ntests/bench/overhead.sh --write-doc\n```\n\n<!-- overhead:begin -->\n<!-- overhead:end -->\n' >>"$doc"
  fi
  awk -v section="$tmp/report.md" '
    /<!-- overhead:begin -->/ { print; while ((getline l < section) > 0) print l; skip = 1; next }
    /<!-- overhead:end -->/ { skip = 0 }
    !skip { print }' "$doc" >"$tmp/doc.md"
  cat "$tmp/doc.md" >"$doc"
  say "updated $doc"
fi
