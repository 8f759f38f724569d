#!/usr/bin/env bash
# The Debian package, as a Debian 12 user gets it. Builds it twice (the second time as a newer
# version), checks it with lintian, then in a clean Debian 12 root made by mmdebstrap from this
# machine's configured Debian mirror: apt install, warmslot --version, check-config of the
# installed config, the service's account running it, an edit of the config, the upgrade that
# keeps the edit and the slot index, remove (keeps them), purge (removes them) and no file left
# behind; last, with systemd installed, systemd-analyze on the unit and its drop-in.
# Exits non-zero on any failure; the root is removed on exit, also when interrupted.
#
#   sudo bash tests/package/deb-test.sh
#
# The base root (mmdebstrap --variant=apt) is cached as a tarball in
# ${WARMSLOT_CACHE:-~/.cache/warmslot}/deb-test, keyed by the mirror's current bookworm Release
# file, the sources, the mmdebstrap version and its options, so a new point release or a
# changed mirror makes a new one. Package lists are fetched anew in every run.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
here=$repo/tests/package
[ "$(id -u)" -eq 0 ] || { echo "deb-test.sh: needs root (mmdebstrap, chroot)" >&2; exit 1; }
for tool in mmdebstrap lintian dpkg-buildpackage dh go-md2man curl unshare; do
  command -v "$tool" >/dev/null ||
    { echo "deb-test.sh: no $tool (bash deploy/install-deps.sh installs it)" >&2; exit 1; }
done

start=$SECONDS
cache="${WARMSLOT_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/warmslot}/deb-test"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/warmslot-deb-test.XXXXXX")
root=$tmp/root
results=$tmp/results

running=""  # the process group of the bounded command that runs now
cleanup() {
  if [ -n "$running" ]; then
    kill -TERM -- "-$running" 2>/dev/null || true
    wait "$running" 2>/dev/null || true
  fi
  # Mounts live only in the namespaces of in_root; --one-file-system guards the host anyway.
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '[%3ds] %s\n' $((SECONDS - start)) "$*"; }
fail() { echo "deb-test.sh: $*" >&2; exit 1; }

# bounded SECONDS CMD...: runs CMD for SECONDS at most, in a process group of its own (timeout's)
# that an interruption of this script stops too.
bounded() {
  timeout --kill-after=10 "$@" </dev/null &
  running=$!
  local status=0
  wait "$running" || status=$?
  running=""
  return "$status"
}

# "${in_root[@]}" CMD...: runs CMD in the root with a clean environment, in new mount and PID
# namespaces: their /proc mount and every process in them end with unshare.
in_root=(unshare --kill-child --mount --propagation private --pid --fork -- /bin/sh -c
  'mount -t proc proc "$0/proc" && exec chroot "$0" /usr/bin/env -i \
     PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
     LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive ${http_proxy:+http_proxy=$http_proxy} "$@"')

# stage NAME ARGS...: tests/package/in-root.sh in the root, its results kept for the summary.
stage() {
  local status=0
  bounded 300 "${in_root[@]}" "$root" bash /tmp/in-root.sh "$@" >"$tmp/stage" 2>&1 || status=$?
  tee -a "$results" <"$tmp/stage" | sed 's/^/    /'
  ((status == 0)) || fail "checks failed after: $1"
}

# The deb lines of this machine's Debian 12 sources (one-line and deb822 files).
debian_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
      awk '$1 == "deb" && $3 ~ /^bookworm(-updates|-security)?$/ { $1 = $1; print }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
               if (s[j] ~ /^bookworm(-updates|-security)?$/) print "deb " u[i] " " s[j] " " comps
           types = ""; nu = ns = 0; comps = ""; enabled = ""
         }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "") }
         key == "types" { types = $0 }
         key == "uris" { nu = split($0, u, " ") }
         key == "suites" { ns = split($0, s, " ") }
         key == "components" { comps = $0 }
         key == "enabled" { enabled = tolower($0) }
         END { flush() }' "$f"
  done
}

# Extracts the base root into $root, making (and caching) it first when needed.
base_root() {
  local sources options release key tarball
  mapfile -t sources < <(debian_sources)
  ((${#sources[@]})) || fail "no bookworm source in /etc/apt/sources.list*"
  options=(--variant=apt --mode=root --format=tar bookworm)
  local main_uri
  main_uri=$(printf '%s\n' "${sources[@]}" | awk '$3 == "bookworm" { print $2; exit }')
  [ -n "$main_uri" ] || fail "no plain bookworm suite in the sources"
  release=$(curl -fsSL --max-time 60 "${main_uri%/}/dists/bookworm/InRelease" | sha256sum) ||
    fail "cannot read ${main_uri%/}/dists/bookworm/InRelease"
  key=$(printf '%s\n' "$(mmdebstrap --version)" "${options[*]}" "${sources[@]}" "$release" |
    sha256sum | cut -c1-16)
  tarball=$cache/bookworm-apt-$key.tar
  if [ ! -s "$tarball" ]; then
    step "making the base root (mmdebstrap ${options[*]}) from: ${sources[*]}"
    mkdir -p "$cache"
    bounded 900 mmdebstrap --quiet "${options[@]}" "$tarball.part" "${sources[@]}" \
      >"$tmp/mmdebstrap.log" 2>&1 || { tail -30 "$tmp/mmdebstrap.log"; fail "mmdebstrap failed"; }
    mv "$tarball.part" "$tarball"
    find "$cache" -maxdepth 1 -name 'bookworm-apt-*.tar*' ! -path "$tarball" -delete
  fi
  mkdir "$root"
  tar -xf "$tarball" -C "$root"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
}

# The paths in the root, less those that apt, dpkg, ldconfig and the account database change by
# design, and /run (a tmpfs on a running system; adduser leaves its lock file there).
ignored=(
  'var/lib/apt/' 'var/cache/(apt|debconf|ldconfig)/' 'var/log/(apt/|dpkg\.log|alternatives\.log)'
  'var/lib/dpkg/(status|available|lock|triggers/|updates/)' 'etc/ld\.so\.cache$' 'run/'
  'etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$'
)
snapshot() {
  local pattern
  pattern="^. \./($(IFS='|'; echo "${ignored[*]}"))"
  (cd "$root" && find . -xdev ! -path './proc/*' ! -path './tmp/*' -printf '%y %p\n') |
    grep -Ev "$pattern" | sort
}

log="${WARMSLOT_BUILD_DIR:-build}/deb/build.log"
build_deb() {  # build_deb ARGS...: deploy/debian/build-deb.sh ARGS (40 minutes at most); sets deb
  bounded 2400 bash deploy/debian/build-deb.sh "$@" >"$tmp/deb" 2>>"$log" ||
    { tail -40 "$log"; fail "the package build failed (build-deb.sh $*)"; }
  deb=$(cat "$tmp/deb")
}
step "building the package (deploy/debian/build-deb.sh, output in $log)"
mkdir -p "$(dirname "$log")"
: >"$log"
build_deb
deb1=$deb
v1=$(dpkg-deb -f "$deb1" Version)
v2="$v1+rebuild1"
step "rebuilding it as $v2"
build_deb --version "$v2"
deb2=$deb
step "package: $(dpkg-deb -f "$deb1" Depends)"

step "lintian $(basename "$deb1")"
status=0
bounded 600 lintian --fail-on error --display-level '>=warning' "$deb1" \
  >"$tmp/lintian" 2>/dev/null || status=$?
sed 's/^/    /' "$tmp/lintian"
((status == 0)) || fail "lintian reports errors"
echo "ok - lintian: no errors" >>"$results"

base_root
step "apt-get update in the root"
bounded 600 "${in_root[@]}" "$root" apt-get update -q -o Acquire::Languages=none \
  >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log"; fail "apt-get update failed"; }
snapshot >"$tmp/before"
install -m 0644 "$deb1" "$root/tmp/warmslot-1.deb"
install -m 0644 "$deb2" "$root/tmp/warmslot-2.deb"
install -m 0644 "$here/in-root.sh" "$root/tmp/in-root.sh"

apt_in_root() {  # apt_in_root WHAT ARGS...: apt -y ARGS in the root, its output in the log
  local what=$1; shift
  step "$what"
  bounded 600 "${in_root[@]}" "$root" apt -y -q "$@" >>"$tmp/apt.log" 2>&1 ||
    { tail -30 "$tmp/apt.log"; fail "$what failed"; }
}
apt_in_root "apt install ./warmslot-1.deb ($v1)" install ./tmp/warmslot-1.deb
stage installed "$v1"
stage service
apt_in_root "apt install ./warmslot-2.deb ($v2), an upgrade" install ./tmp/warmslot-2.deb
stage upgraded "$v2"
apt_in_root "apt remove warmslot" remove warmslot
stage removed
apt_in_root "apt purge --autoremove warmslot" purge --autoremove warmslot
stage purged

# /tmp is not compared: it holds the packages and the checks.
snapshot >"$tmp/after"
if left=$(comm -13 "$tmp/before" "$tmp/after") && [ -n "$left" ]; then
  echo "not ok - no file left behind:" >>"$results"
  sed 's/^/    /' <<<"$left" | head -40 | tee -a "$results"
  fail "files left behind after purge"
fi
echo "ok - no file left behind" >>"$results"

# Last, with systemd installed (it does not run in the root): the unit as systemd reads it.
apt_in_root "apt install systemd ./warmslot-2.deb" install --no-install-recommends systemd \
  ./tmp/warmslot-2.deb
stage unit

passed=$(grep -c '^ok - ' "$results")
failed=$(grep -c '^not ok - ' "$results" || true)
step "done"
echo "$passed passed, $failed failed"
((failed == 0))
