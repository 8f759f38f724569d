#!/usr/bin/env bash
# Installs warmslot as a systemd service, or removes it. Safe to run again: an existing config
# and key file are kept, the binary, unit and schema are replaced, and a running service is
# restarted onto the new binary.
#
#   sudo deploy/systemd/install.sh                  # install, enable and start
#   sudo deploy/systemd/install.sh --no-start       # install files only
#   sudo deploy/systemd/install.sh --uninstall      # stop, disable, remove binary and unit
#   sudo deploy/systemd/install.sh --uninstall --purge   # also /etc/warmslot and /var/lib/warmslot
#
# Options: --binary PATH (default: build/proxy/warmslot of this checkout) and --root DIR (install
# into DIR instead of /, without touching systemd; for packaging and tests).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
binary="$repo/build/proxy/warmslot"
root=""
action=install
start=1
purge=0

while (($#)); do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --root) root="${2%/}"; shift 2 ;;
    --no-start) start=0; shift ;;
    --uninstall) action=uninstall; shift ;;
    --purge) purge=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin_path="$root/usr/local/bin/warmslot"
unit_path="$root/etc/systemd/system/warmslot.service"
conf_dir="$root/etc/warmslot"
state_dirs=("$root/var/lib/warmslot" "$root/var/lib/private/warmslot")

# systemctl only for a real install on a host where systemd is running.
use_systemd=0
if [ -z "$root" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root (sudo), or use --root DIR" >&2; exit 1; }
  if [ -d /run/systemd/system ]; then
    use_systemd=1
  else
    echo "install.sh: systemd is not running here; installing files only" >&2
  fi
fi

# The Debian package owns the same names (/usr/bin/warmslot, the unit, /etc/warmslot): one or
# the other, not both.
if [ -z "$root" ] && dpkg-query -W -f='${Status}' warmslot 2>/dev/null | grep -q 'ok installed'; then
  echo "install.sh: the warmslot Debian package is installed: upgrade it with apt, or remove it" \
    "(apt remove warmslot) before using this installer" >&2
  exit 1
fi

if [ "$action" = uninstall ]; then
  if ((use_systemd)); then
    systemctl disable --now warmslot.service 2>/dev/null || true
  fi
  rm -f "$unit_path" "$bin_path"
  if ((use_systemd)); then systemctl daemon-reload; fi
  if ((purge)); then
    rm -rf "$conf_dir" "${state_dirs[@]}"
    echo "warmslot removed, with its configuration and state"
  else
    echo "warmslot removed; kept $conf_dir and $root/var/lib/warmslot (--purge removes them)"
  fi
  exit 0
fi

[ -x "$binary" ] || { echo "install.sh: no warmslot binary at $binary (build it, or pass --binary)" >&2; exit 1; }

was_active=0
if ((use_systemd)) && systemctl is-active --quiet warmslot.service; then was_active=1; fi

install -D -m 0755 "$binary" "$bin_path.new" && mv -f "$bin_path.new" "$bin_path"
# The unit names the packaged binary, /usr/bin/warmslot; this installer's is in /usr/local/bin.
install -d -m 0755 "$(dirname "$unit_path")"
sed 's|^ExecStart=/usr/bin/warmslot |ExecStart=/usr/local/bin/warmslot |' "$here/warmslot.service" \
  >"$unit_path.new"
grep -q '^ExecStart=/usr/local/bin/warmslot ' "$unit_path.new" ||
  { echo "install.sh: no ExecStart=/usr/bin/warmslot line in $here/warmslot.service" >&2; exit 1; }
chmod 0644 "$unit_path.new" && mv -f "$unit_path.new" "$unit_path"
install -d -m 0755 "$conf_dir"
install -m 0644 "$repo/config/warmslot.schema.json" "$conf_dir/warmslot.schema.json"
if [ ! -e "$conf_dir/warmslot.yaml" ]; then
  # The example, with its `- ${WARMSLOT_API_KEY}` line in use: the service starts keyed.
  # shellcheck disable=SC2016 # ${NAME} is meant literally
  sed 's|^  # - \${WARMSLOT_API_KEY}$|  - ${WARMSLOT_API_KEY}|' "$repo/config/warmslot.example.yaml" \
    >"$conf_dir/warmslot.yaml.new"
  grep -q '^  - \${WARMSLOT_API_KEY}$' "$conf_dir/warmslot.yaml.new" ||
    { echo "install.sh: no '# - \${WARMSLOT_API_KEY}' line in the example config" >&2; exit 1; }
  chmod 0644 "$conf_dir/warmslot.yaml.new" && mv -f "$conf_dir/warmslot.yaml.new" "$conf_dir/warmslot.yaml"
  echo "installed the example config as $conf_dir/warmslot.yaml: edit its backends"
fi
if [ ! -e "$conf_dir/env" ]; then
  # The example config reads its API key from WARMSLOT_API_KEY: give it a random one.
  key="ws-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  # shellcheck disable=SC2016 # ${NAME} is meant literally
  (umask 077 && printf '# Environment for warmslot.service (root only). Keys referenced as ${NAME}.\nWARMSLOT_API_KEY=%s\n' "$key" > "$conf_dir/env")
  echo "wrote a random API key to $conf_dir/env (WARMSLOT_API_KEY)"
fi

if ((use_systemd)); then
  systemctl daemon-reload
  if ((start)); then
    systemctl enable --now warmslot.service
    if ((was_active)); then systemctl restart warmslot.service; fi
    systemctl --no-pager --lines=5 status warmslot.service || true
  else
    systemctl enable warmslot.service
  fi
fi
echo "warmslot installed: $bin_path, $unit_path"
