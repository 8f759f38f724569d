#!/usr/bin/env bash
# The checks tests/package/deb-test.sh runs inside its Debian 12 root, one stage at a time:
#   in-root.sh installed VERSION | service | upgraded VERSION | removed | purged | unit
# It reads its state (the index checksum, the API key) from and to /root/deb-test.state.
# Prints "ok - ..." or "not ok - ..." per check; exits 1 when any check failed.
set -uo pipefail

failed=0
state=/root/deb-test.state
ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failed=1; }
check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what"; printf '  %s\n' "$out" | head -20; fi
}
has() { grep -q -- "$2" "$1" 2>/dev/null; }  # has FILE REGEX
owner_mode() { stat -c '%U:%G %a' "$1" 2>/dev/null; }
remember() { sed -i "/^$1=/d" "$state" 2>/dev/null; echo "$1=$2" >>"$state"; }
recall() { sed -n "s/^$1=//p" "$state"; }

common() {  # checks that hold whenever the package is installed
  local version=$1
  check "dpkg has warmslot $version installed" \
    test "$(dpkg-query -W -f='${Version} ${Status}' warmslot)" = "$version install ok installed"
  check "warmslot --version" bash -c '[ "$(warmslot --version)" = "warmslot ${1%-*}" ]' _ "$version"
  # The packaged config requires the key postinst wrote (systemd passes it from /etc/warmslot/env).
  local key
  key=$(sed -n 's/^WARMSLOT_API_KEY=//p' /etc/warmslot/env 2>/dev/null)
  check "warmslot check-config /etc/warmslot/warmslot.yaml, with the key" \
    env WARMSLOT_API_KEY="$key" warmslot check-config /etc/warmslot/warmslot.yaml
  check "the warmslot account can read the config" \
    runuser -u warmslot -- env WARMSLOT_API_KEY="$key" warmslot check-config /etc/warmslot/warmslot.yaml
  check "every library of the binary is found" \
    bash -c '! ldd /usr/bin/warmslot | grep -q "not found"'
}

installed() {
  local version=$1
  common "$version"
  check "warmslot is a system account with no login" bash -c \
    'IFS=: read -r _ _ uid _ _ home shell < <(getent passwd warmslot) &&
     [ "$uid" -lt 1000 ] && [ "$home" = /var/lib/warmslot ] && [ "$shell" = /usr/sbin/nologin ]'
  check "/var/lib/warmslot belongs to warmslot, mode 750" \
    test "$(owner_mode /var/lib/warmslot)" = "warmslot:warmslot 750"
  check "/etc/warmslot/warmslot.yaml is a conffile" \
    bash -c 'dpkg-query -W -f="\${Conffiles}" warmslot | grep -q "^ /etc/warmslot/warmslot.yaml "'
  check "the config is the commented example" \
    has /etc/warmslot/warmslot.yaml '^# warmslot example configuration'
  check "the config requires WARMSLOT_API_KEY" bash -c \
    'grep -q "^  - \${WARMSLOT_API_KEY}$" /etc/warmslot/warmslot.yaml &&
     ! env -u WARMSLOT_API_KEY warmslot check-config /etc/warmslot/warmslot.yaml'
  check "the schema is beside it" \
    test "$(readlink -f /etc/warmslot/warmslot.schema.json)" = \
    /usr/share/warmslot/warmslot.schema.json
  check "/etc/warmslot/env holds a random key, root only" bash -c \
    '[ "$(stat -c "%U %a" /etc/warmslot/env)" = "root 600" ] &&
     grep -Eq "^WARMSLOT_API_KEY=ws-[0-9a-f]{48}$" /etc/warmslot/env'
  remember key "$(sed -n 's/^WARMSLOT_API_KEY=//p' /etc/warmslot/env)"
  check "the unit runs /usr/bin/warmslot" \
    has /lib/systemd/system/warmslot.service \
    '^ExecStart=/usr/bin/warmslot --config /etc/warmslot/warmslot.yaml$'
  check "the drop-in runs it as warmslot" bash -c \
    'f=/lib/systemd/system/warmslot.service.d/debian.conf
     grep -qx DynamicUser=no $f && grep -qx User=warmslot $f && grep -qx Group=warmslot $f'
  check "the service is enabled" \
    test -L /etc/systemd/system/multi-user.target.wants/warmslot.service
  check "the manual page is warmslot(1)" bash -c \
    'zcat /usr/share/man/man1/warmslot.1.gz | grep -q "^\.TH WARMSLOT 1 "'
  check "zsh and fish completion are installed" \
    test -f /usr/share/zsh/vendor-completions/_warmslot \
    -a -f /usr/share/fish/vendor_completions.d/warmslot.fish
  check "bash completes the subcommands" bash -c \
    '. /usr/share/bash-completion/completions/warmslot && COMP_WORDS=(warmslot c) COMP_CWORD=1 &&
     _warmslot && [ "${COMPREPLY[*]}" = check-config ] &&
     COMP_WORDS=(warmslot warm --m) COMP_CWORD=2 && _warmslot && [ "${COMPREPLY[*]}" = --model ]'
}

# warmslot as the service runs it (its account, $STATE_DIRECTORY), with a backend whose slot
# files are under /var/lib/warmslot: it makes its SQLite index there, then stops on SIGTERM.
# Listens on a free loopback port; the backend's port 9 has nothing behind it.
service() {
  local conf=/tmp/deb-test.yaml index=/var/lib/warmslot/slots/t/warmslot-index.sqlite
  printf '%s\n' 'listen: 127.0.0.1:0' 'backends:' '  - name: t' '    url: http://127.0.0.1:9' \
    '    slot_save_path: /var/lib/warmslot/slots/t' >"$conf"
  install -d -o warmslot -g warmslot /var/lib/warmslot/slots/t
  # setpriv execs warmslot itself (runuser would stay in between and answer the signal).
  STATE_DIRECTORY=/var/lib/warmslot setpriv --reuid=warmslot --regid=warmslot --init-groups \
    warmslot --config "$conf" >/tmp/deb-test.log 2>&1 &
  local pid=$! waited=0
  while ! grep -q '^warmslot listening on http://127.0.0.1:' /tmp/deb-test.log &&
    kill -0 "$pid" 2>/dev/null && ((waited++ < 200)); do sleep 0.1; done
  check "warmslot listens, run as warmslot" grep -q '^warmslot listening on' /tmp/deb-test.log
  kill -TERM "$pid" 2>/dev/null
  waited=0
  while kill -0 "$pid" 2>/dev/null && ((waited++ < 200)); do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  local code=$?
  check "it stops with 0 on SIGTERM" test "$code" = 0
  check "it made its index under /var/lib/warmslot" test -s "$index"
  check "the index belongs to warmslot" test "$(stat -c %U "$index" 2>/dev/null)" = warmslot
  ((failed)) && sed 's/^/  log: /' /tmp/deb-test.log | tail -20
  remember index "$(sha256sum "$index" | cut -d' ' -f1)"
  rm -f "$conf" /tmp/deb-test.log
  # The edit the upgrade must keep.
  sed -i 's/^listen: 127.0.0.1:8080$/listen: 127.0.0.1:8090/' /etc/warmslot/warmslot.yaml
  check "the config was edited" has /etc/warmslot/warmslot.yaml '^listen: 127.0.0.1:8090$'
}

kept_state() {  # the state and the key are those of the first install
  check "the slot index is kept" bash -c \
    '[ "$(sha256sum /var/lib/warmslot/slots/t/warmslot-index.sqlite | cut -d" " -f1)" = "$1" ]' \
    _ "$(recall index)"
  check "the API key is kept" has /etc/warmslot/env "^WARMSLOT_API_KEY=$(recall key)$"
}

upgraded() {
  common "$1"
  check "the edited config is kept" has /etc/warmslot/warmslot.yaml '^listen: 127.0.0.1:8090$'
  check "no .dpkg-* copies of the config" bash -c '! ls /etc/warmslot/*.dpkg-* 2>/dev/null'
  kept_state
}

removed() {
  check "dpkg keeps only the config of warmslot" \
    test "$(dpkg-query -W -f='${Status}' warmslot)" = "deinstall ok config-files"
  check "the binary is gone" test ! -e /usr/bin/warmslot
  check "the unit is gone" test ! -e /lib/systemd/system/warmslot.service
  check "the edited config is kept" has /etc/warmslot/warmslot.yaml '^listen: 127.0.0.1:8090$'
  kept_state
}

purged() {
  check "dpkg has forgotten warmslot" bash -c '! dpkg-query -W warmslot 2>/dev/null'
  local p
  for p in /etc/warmslot /var/lib/warmslot \
    /etc/systemd/system/multi-user.target.wants/warmslot.service \
    /var/lib/systemd/deb-systemd-helper-enabled/warmslot.service.dsh-also; do
    check "$p is gone" test ! -e "$p"
  done
}

# With Debian 12's systemd in the root (not running): the unit and its drop-in as systemd reads
# them.
unit() {
  check "systemd-analyze verify warmslot.service" systemd-analyze verify warmslot.service
  local security
  security=$(systemd-analyze security --offline=true warmslot.service 2>&1)
  check "systemd runs it under the static warmslot account" \
    grep -q 'User=/DynamicUser=.*static non-root user identity' <<<"$security"
  echo "# $(grep 'Overall exposure level' <<<"$security")"
}

stage=${1:?stage}
shift
case $stage in
  installed) installed "$@" ;;
  service) service ;;
  upgraded) upgraded "$@" ;;
  removed) removed ;;
  purged) purged; rm -f "$state" ;;
  unit) unit ;;
  *) echo "in-root.sh: unknown stage $stage" >&2; exit 2 ;;
esac
exit "$failed"
