#!/usr/bin/env bash
# Builds the warmslot Debian package from this checkout with debian/ (dpkg-buildpackage -b).
# Prints the path of the .deb on stdout; the build's own output goes to stderr.
#
#   bash deploy/debian/build-deb.sh                      # build/deb/warmslot_<version>_<arch>.deb
#   bash deploy/debian/build-deb.sh --version 0.1.0-2    # another Debian version (a rebuild)
#
# The checkout's files (tracked and new ones, as git lists them) are copied with their times to
# <build>/deb/src, so the checkout stays clean and the next build reuses the objects there.
# <build> is $WARMSLOT_BUILD_DIR or build. Needs the packages of deploy/install-deps.sh.
# DEB_BUILD_OPTIONS is passed on; unless it is set, no -dbgsym package is made.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="$repo/${WARMSLOT_BUILD_DIR:-build}/deb"
version=""
while (($#)); do
  case "$1" in
    --version) version="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-deb.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

cd "$repo"
# debian/changelog carries the version of the package; its upstream part must be the project's.
upstream=$(sed -n 's/^project(warmslot VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
packaged=$(dpkg-parsechangelog -l debian/changelog -S Version)
if [ "${packaged%-*}" != "$upstream" ]; then
  echo "build-deb.sh: debian/changelog says $packaged, CMakeLists.txt says $upstream:" \
    "add a debian/changelog entry for $upstream" >&2
  exit 1
fi
version=${version:-$packaged}
[ "${version%-*}" = "$upstream" ] ||
  { echo "build-deb.sh: --version $version is not a version of $upstream" >&2; exit 1; }

# Stage the sources, keeping the object directory (obj-*) of the previous build.
mkdir -p "$work/src"
find "$work/src" -mindepth 1 -maxdepth 1 ! -name 'obj-*' -exec rm -rf {} +
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi  # not the deleted ones
  done |
  tar -cf - --null -T - | tar -xf - -C "$work/src"
if [ "$version" != "$packaged" ]; then
  sed -i "1s/^warmslot ([^)]*)/warmslot ($version)/" "$work/src/debian/changelog"
fi

rm -f "$work"/warmslot_"$version"_*.deb
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS-noautodbgsym}"
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
# -nc: no clean first, so that the objects of the last build are reused. Output goes to ../.
(cd "$work/src" && dpkg-buildpackage -b -nc -us -uc) >&2

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="$work/warmslot_${version}_${arch}.deb"
[ -f "$deb" ] || { echo "build-deb.sh: $deb was not made" >&2; exit 1; }
echo "$deb"
