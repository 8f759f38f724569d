#!/usr/bin/env bash
# Installs every Debian 12 package warmslot needs to build, run and test, and to build and
# test its Debian package (debhelper, go-md2man for the manual page, lintian, mmdebstrap).
# Safe to run again: apt-get skips what is already there.
#   --run      only what building and running warmslot needs (deploy/run.sh): no test tools,
#              no nginx or haproxy (Debian starts them on install: nginx would take port 80)
#   --list     print the packages it would install, install nothing
#   --browser  also Chromium, for the dashboard test (tests/integration/dashboard.test.mjs);
#              large (about 300 MB installed), so only the test run asks for it.
set -euo pipefail

# Building and running warmslot (and the demo's pinned llama-server, built from source).
run_packages=(
  build-essential cmake ninja-build git ca-certificates curl pkg-config
  libboost1.81-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libyaml-cpp-dev libsqlite3-dev libxxhash-dev libmimalloc-dev libre2-dev libssl-dev
)
# Testing it, and building and testing its package.
test_packages=(
  clang libclang-rt-14-dev llvm-14 clang-format clang-tidy doctest-dev
  nginx-light sqlite3 ccache
  haproxy iproute2 glusterfs-server glusterfs-client
  debhelper dpkg-dev go-md2man lintian mmdebstrap
)
# libclang-rt-14-dev: the ASan, UBSan and libFuzzer runtimes (clang only recommends it);
# llvm-14: llvm-symbolizer, for file and line in sanitizer reports (tests/sanitizers.sh).
# clang-format, clang-tidy: the checks of tests/tools/format.sh and tidy.sh.
# haproxy and iproute2 (ip netns): the multi-host setup in deploy/cluster/ and its test;
# glusterfs-server and glusterfs-client: its shared tier on GlusterFS (cluster.sh --shared gluster),
# which runs glusterds of its own inside the hosts' namespaces (deploy/cluster/gluster.sh).
# The pinned llama-server and the openai client tests come from npm.
run_only=0
browser=0
list=0
for arg in "$@"; do
  case "$arg" in
    --run) run_only=1 ;;
    --browser) browser=1 ;;
    --list) list=1 ;;
    *) echo "usage: install-deps.sh [--run] [--browser] [--list]" >&2; exit 2 ;;
  esac
done
packages=("${run_packages[@]}")
if ((!run_only)); then packages+=("${test_packages[@]}"); fi
if ((browser)); then packages+=(chromium); fi
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
if ((list)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  # A glusterd of the machine's own would listen on its real network (port 24007) for peers to
  # join. Debian 12's package neither enables nor starts glusterd.service on a fresh install, but
  # should it (another release, a local policy), it is stopped and kept from starting at boot. Only
  # when this run installed the package: a glusterd already in use on the machine is left alone.
  if [[ " ${missing[*]} " == *" glusterfs-server "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now -q glusterd.service 2>/dev/null ||
      echo "install-deps.sh: could not stop and disable glusterd.service; is it running?" >&2
  fi
fi
