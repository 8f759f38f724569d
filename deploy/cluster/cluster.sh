#!/usr/bin/env bash
# Two GPU "hosts" on one machine behind HAProxy, as docs/scaling.md describes: each host is a
# network namespace with its own llama-server and its own warmslot, and HAProxy (this directory's
# haproxy.cfg) balances over them by prefix key. Run as root.
#
#   bash deploy/cluster/cluster.sh [--hosts 1|2] [--balance hash|roundrobin] [--port N]
#        [--slots N] [--ctx N] [--threads N] [--llama-args "ARGS"] [--disk]
#        [--shared DIR|gluster] [--balance-factor N] [--duration SECONDS] [--model PATH]
#
#   --hosts     how many hosts (default 2; 1 drops h2 from the balancer)
#   --balance   hash (default: prefix affinity, haproxy.cfg as it is) | roundrobin
#   --port      the balancer's port on 127.0.0.1 (default 8090); its stats page is on the next
#   --slots     llama-server -np per host (default 4); --ctx tokens per slot (default 16384)
#   --threads   llama-server -t per host (default 1: each host its own core on a 2-core machine)
#   --llama-args  more llama-server arguments, e.g. "--cache-ram 0"
#   --disk      give each warmslot its disk tier (slot files in the host's own directory)
#   --shared    with --disk: every warmslot's shared tier (cache.shared_dir) is DIR, a directory
#               all hosts see (a shared file system mounted there, or a plain directory: the
#               hosts are network namespaces on one machine and see the same files).
#               --shared gluster: a GlusterFS volume instead, replicated over one brick per host
#               (gluster.sh in this directory; glusterfs-server and glusterfs-client installed):
#               each host runs its own glusterd in its namespace, and its warmslot's shared_dir
#               is that host's own mount of the volume, hN/shared in the printed directory
#   --balance-factor  HAProxy's hash-balance-factor N (bounded load: a hot key spills to the next
#               host once its own host has more than N% of the average load); default: the 150
#               of haproxy.cfg; 0: none (every key stays on its host)
#   --duration  stop by itself after this many seconds (default 3600)
#   --model     a GGUF file (default: the generated test model, tests/models/models.sh llama)
#
# Network: namespaces wsc-lb (the balancer's side), wsc-h1 and wsc-h2, joined by veth pairs
# wsc-lb 10.200.N.1/24 <-> wsc-hN 10.200.N.2/24. No address is added outside them and nothing is
# routed anywhere else (with --shared gluster the hosts also reach each other, through wsc-lb,
# which then forwards between its veth pairs; see gluster.sh). In each host llama-server listens
# on the host's own 127.0.0.1:8081 and warmslot on 10.200.N.2:8080. HAProxy runs in this
# namespace, listens on 127.0.0.1:PORT and opens its connections to the hosts from inside wsc-lb
# (`namespace wsc-lb` on its server lines).
#
# When everything answers, one line goes to stdout: "ready " and a JSON object with the URLs,
# namespaces and process ids. The script then waits until SIGINT or SIGTERM, until --duration
# passes or until the process that started it is gone, and then stops every process it started
# and deletes every namespace it made (also when start-up fails). Logs stay in the printed
# directory; the slot files (and gluster's bricks and state) are removed. Only SIGKILL leaves
# them behind; a later run names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/wait.sh
. "$here/wait.sh"
root=$(cd "$here/../.." && pwd)

hosts=2 balance=hash port=8090 slots=4 ctx=16384 threads=1 llama_args="" disk=0 duration=3600
model="" shared="" balance_factor=""
usage() { sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --balance) balance=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --llama-args) llama_args=$2; shift 2 ;;
    --disk) disk=1; shift ;;
    --shared) shared=$2; shift 2 ;;
    --balance-factor) balance_factor=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "cluster.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done
[[ $hosts =~ ^[12]$ ]] || { echo "cluster.sh: --hosts is 1 or 2" >&2; exit 2; }
[[ $balance =~ ^(hash|roundrobin)$ ]] || { echo "cluster.sh: --balance is hash or roundrobin" >&2; exit 2; }
for n in "$port" "$slots" "$ctx" "$threads" "$duration"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "cluster.sh: $n is not a number" >&2; exit 2; }
done
if [ -n "$shared" ]; then
  ((disk)) || { echo "cluster.sh: --shared needs --disk" >&2; exit 2; }
  [[ $shared == gluster || ($shared == /* && -d $shared) ]] ||
    { echo "cluster.sh: --shared $shared is neither an absolute directory nor gluster" >&2; exit 2; }
fi
[ -z "$balance_factor" ] || [[ $balance_factor =~ ^[0-9]+$ && ($balance_factor -ge 100 || $balance_factor -eq 0) ]] ||
  { echo "cluster.sh: --balance-factor is 0 or a whole number of at least 100" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (ip netns)" >&2; exit 1; }
command -v haproxy >/dev/null || { echo "cluster.sh: no haproxy (bash deploy/install-deps.sh)" >&2; exit 1; }
[ "$shared" != gluster ] || command -v glusterd >/dev/null ||
  { echo "cluster.sh: no glusterd (bash deploy/install-deps.sh)" >&2; exit 1; }

warmslot=${WARMSLOT_BIN:-$root/build/proxy/warmslot}
[ -x "$warmslot" ] || { echo "cluster.sh: no warmslot binary at $warmslot (build it or set WARMSLOT_BIN)" >&2; exit 1; }
llama=$(bash "$root/tests/llama/llama-server.sh")
[ -n "$model" ] || model=$(bash "$root/tests/models/models.sh" llama)

namespaces=(wsc-lb)
for ((i = 1; i <= hosts; i++)); do namespaces+=("wsc-h$i"); done
for ns in "${namespaces[@]}"; do
  if ip netns list | grep -qw "$ns"; then
    echo "cluster.sh: namespace $ns exists already (another cluster running, or one killed with" \
      "SIGKILL, which no trap sees); not touching it. To remove a dead one:" \
      "ip netns pids $ns | xargs -r kill; ip netns del $ns" >&2
    exit 1
  fi
done

dir=$(mktemp -d /tmp/warmslot-cluster-XXXXXX)
made_ns=()
pids=()
exec 4>&2  # stderr, also for messages from checks whose own output is discarded
log() { echo "cluster.sh: $*" >&4; }

# Stops what this script started, then deletes its namespaces (and so their veth pairs). Any
# process still inside one of them was started from here (llama-server, warmslot). With
# --shared gluster the volume goes after the warmslots (which may still write to it while they
# stop) and before the namespaces its servers live in.
cleanup() {
  local status=$?
  trap '' INT TERM
  set +e
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for ((t = 0; t < 100; t++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ "$shared" = gluster ] && bash "$here/gluster.sh" down "$dir"
  for ns in "${made_ns[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$dir"/h*/slots
  log "stopped; logs in $dir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Whether process $1 runs (a child that exited stays a zombie until it is waited for).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]; }


routing() { ip netns exec wsc-lb curl -sf --max-time 5 "http://10.200.$1.2:8080/health" | grep '"routing":true' >/dev/null; }

ip netns add wsc-lb
made_ns+=(wsc-lb)
ip -n wsc-lb link set lo up
for ((i = 1; i <= hosts; i++)); do
  ns=wsc-h$i
  ip netns add "$ns"
  made_ns+=("$ns")
  ip -n "$ns" link set lo up
  ip -n wsc-lb link add "h$i" type veth peer name lb netns "$ns"
  ip -n wsc-lb addr add "10.200.$i.1/24" dev "h$i"
  ip -n wsc-lb link set "h$i" up
  ip -n "$ns" addr add "10.200.$i.2/24" dev lb
  ip -n "$ns" link set lb up
done

# The shared tier each host's warmslot gets: the directory given, or with gluster the host's own
# mount of the volume (gluster.sh prints "mount hN PATH" for each, then "gluster ready").
host_shared=()
if [ "$shared" = gluster ]; then
  gluster_out=$(bash "$here/gluster.sh" up "$dir" "$hosts") ||
    { log "the gluster volume did not come up, see $dir/h*/gluster/log"; exit 1; }
  [[ $gluster_out == *"gluster ready"* ]] || { log "gluster.sh up did not say ready"; exit 1; }
  for ((i = 1; i <= hosts; i++)); do
    host_shared[i]=$(awk -v h="h$i" '$1 == "mount" && $2 == h { print $3 }' <<<"$gluster_out")
    [ -n "${host_shared[i]}" ] || { log "gluster.sh up named no mount for h$i"; exit 1; }
  done
elif [ -n "$shared" ]; then
  for ((i = 1; i <= hosts; i++)); do host_shared[i]=$shared; done
fi

host_json=()
for ((i = 1; i <= hosts; i++)); do
  ns=wsc-h$i
  hdir=$dir/h$i
  mkdir -p "$hdir/slots" "$hdir/cache"
  # shellcheck disable=SC2086 # --llama-args is a list of words
  ip netns exec "$ns" "$llama" -m "$model" --host 127.0.0.1 --port 8081 -np "$slots" \
    -c $((slots * ctx)) -t "$threads" --metrics --slot-save-path "$hdir/slots" $llama_args \
    >"$hdir/llama-server.log" 2>&1 &
  llama_pid=$!
  pids+=("$llama_pid")
  {
    echo "listen: 10.200.$i.2:8080"
    echo "backends:"
    echo "  - name: h$i-gpu0"
    echo "    url: http://127.0.0.1:8081"
    ((disk)) && echo "    slot_save_path: $hdir/slots"
    echo "cache:"
    echo "  dir: $hdir/cache"
    ((disk)) && echo "  min_prefix_tokens: 512"
    [ -n "$shared" ] && echo "  shared_dir: ${host_shared[i]}"
    echo "log:"
    echo "  level: info"
  } >"$hdir/warmslot.yaml"
  ip netns exec "$ns" "$warmslot" --config "$hdir/warmslot.yaml" >"$hdir/warmslot.log" 2>&1 &
  ws_pid=$!
  pids+=("$ws_pid")
  shared_json=""
  [ -n "$shared" ] && shared_json=",\"shared\":\"${host_shared[i]}\""
  host_json+=("{\"name\":\"h$i\",\"ns\":\"$ns\",\"warmslot\":\"http://10.200.$i.2:8080\",\"llama\":\"http://127.0.0.1:8081\",\"llama_pid\":$llama_pid,\"warmslot_pid\":$ws_pid,\"dir\":\"$hdir\"$shared_json}")
done

for ((i = 1; i <= hosts; i++)); do
  wait_until 180 ip netns exec "wsc-h$i" curl -sf --max-time 5 http://127.0.0.1:8081/health ||
    { log "llama-server on h$i did not start, see $dir/h$i/llama-server.log"; exit 1; }
  # Through the veth pair, as the balancer will reach it; ready once warmslot has probed its
  # llama-server and routes to its slots.
  wait_until 60 routing "$i" ||
    { log "warmslot on h$i did not answer or route, see $dir/h$i/warmslot.log"; exit 1; }
done

cfg=$dir/haproxy.cfg
# The stats page on the port after the balancer's; no user, group or chroot: the servers are
# reached in network namespaces, which needs root.
stats_port=$((port + 1))
sed -e "s/^\(    bind 127\.0\.0\.1:\)8090$/\1$port/" -e "s/^\(    bind 127\.0\.0\.1:\)8404$/\1$stats_port/" \
  -e '/^    user haproxy$/d' -e '/^    group haproxy$/d' -e '/^    chroot \/var\/lib\/haproxy$/d' \
  "$here/haproxy.cfg" >"$cfg"
[ "$balance" = roundrobin ] && sed -i 's/^    balance hash var(txn.prefix)$/    balance roundrobin/' "$cfg"
((hosts == 1)) && sed -i '/^    server h2 /d' "$cfg"
if [ "$balance_factor" = 0 ]; then
  sed -i '/^    hash-balance-factor /d' "$cfg"
elif [ -n "$balance_factor" ]; then
  sed -i "s/^    hash-balance-factor .*$/    hash-balance-factor $balance_factor/" "$cfg"
fi
haproxy -c -q -f "$cfg"
haproxy -db -f "$cfg" >"$dir/haproxy.log" 2>&1 &
haproxy_pid=$!
pids+=("$haproxy_pid")
stats="http://127.0.0.1:$stats_port/balancer/stats;csv"
# Ready when every host passed its health checks.
up_count() { curl -sf --max-time 5 "$stats" | awk -F, '$1 == "warmslot_hosts" && $2 ~ /^h[0-9]$/ && $18 == "UP"' | wc -l; }
all_up() {
  running "$haproxy_pid" || { log "haproxy exited, see $dir/haproxy.log"; exit 1; }
  [ "$(up_count)" -eq "$hosts" ]
}
wait_until 30 all_up ||
  { log "HAProxy did not see the hosts up, see $dir/haproxy.log"; exit 1; }

hosts_list=$(IFS=,; echo "${host_json[*]}")
echo "ready {\"balancer\":\"http://127.0.0.1:$port\",\"stats\":\"$stats\",\"balance\":\"$balance\",\"dir\":\"$dir\",\"haproxy_pid\":$haproxy_pid,\"hosts\":[$hosts_list]}"

parent=$PPID
end=$((SECONDS + duration))
while ((SECONDS < end)) && kill -0 "$parent" 2>/dev/null; do sleep 1; done
log "stopping (duration over or the parent process gone)"
