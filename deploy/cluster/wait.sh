# Sourced by cluster.sh and gluster.sh.
# Waits until `$@` succeeds, at most $1 seconds (the command follows).
wait_until() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.2
  done
}
