#!/usr/bin/env bash
# A GlusterFS volume for the hosts of cluster.sh, so that their shared tier (cache.shared_dir) is
# a real distributed file system rather than a directory both namespaces happen to see. Run as
# root on Debian 12 with glusterfs-server and glusterfs-client installed (deploy/install-deps.sh).
#
#   bash deploy/cluster/gluster.sh up DIR HOSTS    (HOSTS is 1 or 2)
#   bash deploy/cluster/gluster.sh kill DIR hN
#   bash deploy/cluster/gluster.sh down DIR
#
#   up    the namespaces wsc-h1 .. wsc-hHOSTS and wsc-lb must exist (cluster.sh makes them). For
#         each host it starts a glusterd in that host's network namespace, listening on
#         10.200.N.2, with its brick in DIR/hN/brick; then it makes one volume over the bricks
#         (replica 2 with two hosts) and mounts it for each host at DIR/hN/shared. It prints
#         "mount hN PATH" for each host and then "gluster ready"; everything else goes to stderr
#         or to DIR/hN/gluster/ and DIR/gluster-cli.log. If it fails it stops what it started.
#   kill  SIGKILLs host hN's glusterd and brick (and its self-heal daemon), as if the host died;
#         its client mount stays. The other host's mount keeps working: reads and writes go to
#         the surviving brick once the client notices, at once for a killed process and within
#         network.ping-timeout (5 s) for a host that stops answering.
#   down  unmounts everything under DIR, stops every gluster process up started and removes the
#         bricks and the glusterd state; the logs stay. Safe to run twice or after a failed up.
#
# Two glusterds on one machine must not share their state: each keeps it in /var/lib/glusterd,
# its pid and socket files in /run/gluster and its logs in /var/log/glusterfs, and several of
# those paths are built into glusterd. So each host's glusterd runs in a mount namespace of its
# own in which DIR/hN/gluster/{state,run,log} are bind-mounted over those three directories; the
# bricks and the self-heal daemon it starts inherit it, and so do the gluster commands this
# script runs (they write there too). The namespace is private: nothing mounted there shows
# outside. Its command socket is moved from /run into /run/gluster. The client mounts (a glusterfs
# process per host) run in the host's network namespace but in this mount namespace, so that
# DIR/hN/shared is visible here and to the warmslot that cluster.sh starts afterwards.
#
# Network: the hosts reach each other (peer probe, brick traffic) through wsc-lb: forwarding is
# turned on inside wsc-lb only, and each host gets a route to 10.200.0.0/16 via its side of its
# veth pair. Nothing is added or routed outside these namespaces.
set -euo pipefail

volume=warmslot
exec 4>&2
log() { echo "gluster.sh: $*" >&4; }
die() { log "$*"; exit 1; }
usage() {
  sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&$((${1:-0} ? 2 : 1))
  exit "${1:-0}"
}

(($# >= 2)) || usage 2
cmd=$1 dir=$2
[[ $dir == /* ]] || die "DIR must be an absolute path: $dir"
dir=${dir%/}
[ -n "$dir" ] || die "DIR must not be /"
[ "$(id -u)" -eq 0 ] || die "needs root (namespaces, mounts)"

# shellcheck source=SCRIPTDIR/wait.sh
. "$(cd "$(dirname "$0")" && pwd)/wait.sh"

# The gluster command line for host $1's glusterd, run in that glusterd's mount namespace: the
# command writes files under /var/lib/glusterd and /var/log/glusterfs of its own, which then land
# in the host's directories too. It talks to glusterd over the unix socket (no network needed).
cli() {
  local h=$1 pid; shift
  pid=$(cat "$dir/h$h/gluster/run/glusterd.pid" 2>/dev/null) || return 1
  [ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" = "$(cat "$dir/h$h/gluster/mntns")" ] || return 1
  nsenter --mount="/proc/$pid/ns/mnt" gluster --mode=script \
    --glusterd-sock=/run/gluster/glusterd.socket "$@"
}

# The processes whose mount namespace is $1 (a name like mnt:[4026532...]) and whose command is
# a gluster one. The name of a namespace can be reused once it is gone, hence the second test.
in_mntns() {
  local want=$1 p comm
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$want" ] || continue
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    [[ $comm =~ ^gluster(d|fsd|fs)?$ || $comm =~ ^glfs_ ]] && echo "${p#/proc/}"
  done
  return 0
}

# Host $1's server-side processes: glusterd, its brick and its self-heal daemon.
server_pids() {
  local f=$dir/h$1/gluster/mntns ns
  [ -s "$f" ] || return 0
  ns=$(cat "$f")
  [ "$ns" != "$(readlink /proc/self/ns/mnt)" ] || return 0  # never this namespace
  in_mntns "$ns"
}

# Host $1's client mount process, if it still runs and is the one up started.
client_pid() {
  local f=$dir/h$1/gluster/client.pid p
  [ -s "$f" ] || return 0
  p=$(cat "$f")
  [[ $p =~ ^[0-9]+$ ]] || return 0
  tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF " $dir/h$1/shared" && echo "$p"
  return 0
}

# Runs `$@` with no file descriptors but 0, 1 and 2: the daemons it starts would otherwise keep
# whatever the caller had open (a pipe reading this script's stderr, say) open for as long as
# they run, and whoever reads that pipe would never see its end.
without_fds() {
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      ((fd > 2)) && eval "exec $fd>&-"
    done
    exec "$@"
  )
}

# Sends SIGTERM to the processes given, waits up to 5 s, then SIGKILLs those left.
stop_pids() {
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local t p alive
  for ((t = 0; t < 50; t++)); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

# The mount points under DIR, deepest first (so a mount inside another goes first).
mounts_under() {
  awk -v d="$dir/" '{ p = $5; gsub(/\\040/, " ", p); if (index(p, d) == 1) print p }' \
    /proc/self/mountinfo | sort -r
}

down() {
  set +e
  [ -d "$dir" ] || return 0
  local m h pids=() more
  # The mounts first, while their servers still answer: the client processes then exit.
  while IFS= read -r m; do
    timeout 10 umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
      log "could not unmount $m"
  done < <(mounts_under)
  for h in "$dir"/h[0-9]*/; do
    h=${h%/}; h=${h##*/h}
    [[ $h =~ ^[0-9]+$ ]] || continue
    mapfile -t more < <(client_pid "$h"; server_pids "$h")
    pids+=("${more[@]}")
  done
  stop_pids "${pids[@]}"
  for h in "$dir"/h[0-9]*/; do
    rm -rf "${h}brick" "${h}gluster/state" "${h}gluster/run" "${h}gluster/mntns" \
      "${h}gluster/client.pid"
    [ -d "${h}shared" ] && ! mountpoint -q "${h}shared" && rmdir "${h}shared" 2>/dev/null
  done
  return 0
}

case "$cmd" in
  down)
    (($# == 2)) || usage 2
    down
    exit 0
    ;;
  kill)
    if (($# != 3)) || [[ ! $3 =~ ^h([0-9]+)$ ]]; then usage 2; fi
    h=${BASH_REMATCH[1]}
    mapfile -t pids < <(server_pids "$h")
    ((${#pids[@]})) || die "no gluster server processes of h$h under $dir"
    kill -KILL "${pids[@]}"
    log "killed h$h's glusterd, brick and self-heal daemon: ${pids[*]}"
    exit 0
    ;;
  up)
    if (($# != 3)) || [[ ! $3 =~ ^[12]$ ]]; then usage 2; fi
    hosts=$3
    ;;
  *) usage 2 ;;
esac

for c in glusterd glusterfs gluster; do
  command -v "$c" >/dev/null || die "no $c (apt-get install glusterfs-server glusterfs-client)"
done
[ -c /dev/fuse ] || die "no /dev/fuse: the client mounts need FUSE (modprobe fuse)"
for ((i = 1; i <= hosts; i++)); do
  [ -e "/run/netns/wsc-h$i" ] || die "no namespace wsc-h$i (cluster.sh makes it)"
  [ ! -e "$dir/h$i/gluster/mntns" ] || die "$dir/h$i has a gluster already (gluster.sh down $dir)"
done
((hosts == 1)) || [ -e /run/netns/wsc-lb ] || die "no namespace wsc-lb (cluster.sh makes it)"

# Whatever fails from here on, what was started is stopped again (cluster.sh runs down too).
on_exit() {
  local status=$?
  ((status)) || return 0
  log "failed; stopping what was started (logs in $dir/h*/gluster)"
  down
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start=$SECONDS

# Routes between the hosts, through wsc-lb (replace: idempotent).
if ((hosts > 1)); then
  ip netns exec wsc-lb sysctl -qw net.ipv4.ip_forward=1
  for ((i = 1; i <= hosts; i++)); do
    ip -n "wsc-h$i" route replace 10.200.0.0/16 via "10.200.$i.1"
  done
fi

for ((i = 1; i <= hosts; i++)); do
  g=$dir/h$i/gluster
  mkdir -p "$g/state" "$g/run" "$g/log" "$dir/h$i/brick"
  # Debian's /etc/glusterfs/glusterd.vol, plus the address family, the address and the socket.
  # ping-timeout 0: the glusterds notice a lost peer by its connection closing, as on Debian.
  cat >"$g/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory /var/lib/glusterd
    option transport-type socket
    option transport.address-family inet
    option transport.socket.bind-address 10.200.$i.2
    option transport.socket.listen-port 24007
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option glusterd-sockfile /run/gluster/glusterd.socket
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF
  # glusterd puts itself in the background once it listens; its pid file is then written.
  # shellcheck disable=SC2016 # expanded by the inner sh
  without_fds nsenter --net="/run/netns/wsc-h$i" unshare --mount --propagation private \
    sh -c 'mount --bind "$1/state" /var/lib/glusterd && mount --bind "$1/run" /run/gluster &&
      mount --bind "$1/log" /var/log/glusterfs &&
      exec glusterd -f "$1/glusterd.vol" -p /run/gluster/glusterd.pid \
        -l /var/log/glusterfs/glusterd.log' \
    sh "$g" </dev/null >>"$g/log/start.log" 2>&1 ||
    die "glusterd on h$i did not start, see $g/log/glusterd.log and $g/log/start.log"
  wait_until 10 test -s "$g/run/glusterd.pid" || die "glusterd on h$i wrote no pid file"
  readlink "/proc/$(cat "$g/run/glusterd.pid")/ns/mnt" >"$g/mntns" ||
    die "glusterd on h$i exited, see $g/log/glusterd.log"
  wait_until 30 cli "$i" peer status ||
    die "glusterd on h$i does not answer, see $g/log/glusterd.log"
done

if ((hosts > 1)); then
  # Probing a peer already probed succeeds, so a probe that failed early is simply repeated.
  probe() { cli 1 peer probe 10.200.2.2 >>"$dir/gluster-cli.log" 2>&1; }
  wait_until 30 probe || die "peer probe 10.200.2.2 failed, see $dir/gluster-cli.log"
  peered() { cli 1 peer status | grep -q 'Peer in Cluster (Connected)' &&
    cli 2 peer status | grep -q 'Peer in Cluster (Connected)'; }
  wait_until 60 peered ||
    die "h1 and h2 did not become peers, see $dir/h*/gluster/log/glusterd.log"
  bricks=("10.200.1.2:$dir/h1/brick" "10.200.2.2:$dir/h2/brick")
  layout=(replica 2)
else
  bricks=("10.200.1.2:$dir/h1/brick")
  layout=()
fi
# force: the bricks are directories on the root file system, which gluster refuses otherwise.
# Creating right after the probe can fail while the peers still exchange their state: retried.
create() {
  cli 1 volume create "$volume" "${layout[@]}" "${bricks[@]}" force >>"$dir/gluster-cli.log" 2>&1
}
wait_until 30 create || die "volume create failed, see $dir/gluster-cli.log"
# A test volume of two replicas of which one may die: no quorum (either brick alone may take
# writes; split-brain is possible and accepted here), and a client gives up on a host that does
# not answer after 5 s instead of 42. The self-heal daemon brings a returning brick up to date.
for opt in "cluster.quorum-type none" "cluster.server-quorum-type none" "network.ping-timeout 5"; do
  # shellcheck disable=SC2086 # name and value
  cli 1 volume set "$volume" $opt >>"$dir/gluster-cli.log" 2>&1 ||
    die "volume set $opt failed, see $dir/gluster-cli.log"
done
cli 1 volume start "$volume" >>"$dir/gluster-cli.log" 2>&1 ||
  die "volume start failed, see $dir/gluster-cli.log"
# Every brick online (status 1). XML, because the table wraps a long brick path over two lines.
bricks_online() {
  [ "$(cli 1 volume status "$volume" --xml |
    awk '/<path>\// { brick = 1; next } /<path>/ { brick = 0 }
      brick && /<status>1<\/status>/ { n++ } END { print n + 0 }')" -eq "$hosts" ]
}
wait_until 30 bricks_online || die "the bricks did not come online, see $dir/h*/gluster/log/bricks"

for ((i = 1; i <= hosts; i++)); do
  g=$dir/h$i/gluster
  m=$dir/h$i/shared
  mkdir -p "$m"
  without_fds nsenter --net="/run/netns/wsc-h$i" glusterfs --process-name fuse \
    --volfile-server="10.200.$i.2" --volfile-id="$volume" --log-file="$g/log/client.log" \
    --pid-file="$g/client.pid" "$m" </dev/null >>"$g/log/start.log" 2>&1 ||
    die "mounting the volume on h$i failed, see $g/log/client.log"
  # The root of a gluster mount is inode 1 once the client has its volume. Each look at the
  # mount has a time limit of its own, as a mount that hangs would hold up the loop around it.
  mounted() { timeout 5 mountpoint -q "$1" && [ "$(timeout 5 stat -c %i "$1")" = 1 ]; }
  wait_until 30 mounted "$m" || die "the volume did not mount at $m, see $g/log/client.log"
done

# A file written through h1's mount must be seen through every mount, with its content.
marker=.gluster-probe-$$
echo "$marker" | timeout 10 tee "$dir/h1/shared/$marker" >/dev/null ||
  die "could not write through h1's mount, see $dir/h1/gluster/log/client.log"
for ((i = 1; i <= hosts; i++)); do
  seen() { [ "$(timeout 5 cat "$dir/h$1/shared/$marker")" = "$marker" ]; }
  wait_until 60 seen "$i" || die "a file written through h1's mount is not seen through h$i's"
done
timeout 10 rm -f "$dir/h1/shared/$marker"
log "up in $((SECONDS - start)) s: volume $volume over ${bricks[*]}"

for ((i = 1; i <= hosts; i++)); do echo "mount h$i $dir/h$i/shared"; done
echo "gluster ready"
