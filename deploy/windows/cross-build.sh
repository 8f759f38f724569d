#!/usr/bin/env bash
# Cross-builds warmslot.exe for 64-bit Windows on Debian 12 (run as root, or with sudo).
#
#   bash deploy/windows/cross-build.sh          prints the path of the built warmslot.exe
#
# Compiler: Debian's clang with the mingw-w64 posix-threads runtime and libstdc++
# (cmake/mingw-w64-clang.cmake). Dependencies come from Debian only: Boost and nlohmann/json
# headers from their -dev packages; SQLite, yaml-cpp, spdlog, fmt, xxHash and RE2 from Debian's
# source packages (apt-get source against deb.debian.org), built for the mingw target. They are cached in
# $WARMSLOT_CACHE/windows (default ~/.cache/warmslot), keyed below, so only the first run builds
# them (about 3 minutes on 2 cores). wine64 is installed too: the smoke tests run the exe with it.
#
#   WARMSLOT_WIN_BUILD_DIR   build directory of warmslot itself (default build-windows)
#   WARMSLOT_JOBS            parallel jobs (default: nproc, at most 2)
# Progress goes to stderr; stdout is the path of warmslot.exe. The exe carries no debug
# information: the build moves it to warmslot.exe.debug next to the exe (proxy/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
triple=x86_64-w64-mingw32
key=bookworm-3  # bump when the packages, versions or flags below change
cache="${WARMSLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmslot}"
dir="$cache/windows-deps-$key"
prefix="$dir/prefix"
out="${WARMSLOT_WIN_BUILD_DIR:-build-windows}"
jobs="${WARMSLOT_JOBS:-$(nproc)}"
((jobs > 2)) && jobs=2
toolchain="$root/cmake/mingw-w64-clang.cmake"
log() { echo "windows: $*" >&2; }

install_packages() {
  local packages=(clang lld cmake ninja-build dpkg-dev tcl libboost1.81-dev nlohmann-json3-dev
    g++-mingw-w64-x86-64-posix wine64 wine perl python3 python3-six unicode-data) missing=() p sudo=""
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# deb-src entries for Debian's own archive, when apt has none yet.
enable_sources() {
  if grep -rqs '^\(Types: *deb-src\|deb-src \)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return 0
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "adding deb-src entries for deb.debian.org"
  $sudo tee /etc/apt/sources.list.d/warmslot-debian-src.sources >/dev/null <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  $sudo apt-get update -q >&2
}

cmake_dep() {  # name source-dir [cmake args...]
  local name=$1 src=$2
  shift 2
  log "building $name"
  cmake -S "$src" -B "$work/build-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DWARMSLOT_WIN_PREFIX="$prefix" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=OFF "$@" >&2
  cmake --build "$work/build-$name" -j"$jobs" --target install >&2
}

build_deps() {
  enable_sources
  work=$(mktemp -d "$dir/tmp.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "fetching Debian sources: sqlite3 yaml-cpp spdlog fmtlib xxhash re2"
  (cd "$work" && apt-get source -q sqlite3 yaml-cpp spdlog fmtlib xxhash re2 >&2)
  rm -rf "$prefix"
  mkdir -p "$prefix/include" "$prefix/lib/cmake" "$prefix/share/cmake"
  # Header-only libraries from the build host's -dev packages, seen through the prefix. Their
  # CMake package files are copied so that they resolve their include directory to the prefix.
  ln -s /usr/include/boost "$prefix/include/boost"
  ln -s /usr/include/nlohmann "$prefix/include/nlohmann"
  cp -r /usr/lib/x86_64-linux-gnu/cmake/Boost-1.81.0 \
    /usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.81.0 "$prefix/lib/cmake/"
  # Debian's Boost files sit one level deeper (lib/x86_64-linux-gnu/cmake) than they do here.
  sed -i 's|/../../../include/"|/../../include/"|' \
    "$prefix/lib/cmake/boost_headers-1.81.0/boost_headers-config.cmake"
  cp -r /usr/share/cmake/nlohmann_json "$prefix/share/cmake/"
  # SQLite's amalgamation (sqlite3.c) is generated from the source tree by a host build.
  log "generating the SQLite amalgamation"
  mkdir "$work/sqlite-host"
  (cd "$work/sqlite-host" && "$work"/sqlite3-*/configure --disable-tcl >/dev/null &&
    make -j"$jobs" sqlite3.c >/dev/null)
  cmake_dep sqlite-xxhash "$root/deploy/windows/deps" \
    -DSQLITE_AMALGAMATION="$work/sqlite-host" -DXXHASH_SOURCE="$(echo "$work"/xxhash-*/)"
  cmake_dep fmt "$(echo "$work"/fmtlib-*/)" -DFMT_DOC=OFF -DFMT_TEST=OFF -DFMT_INSTALL=ON
  cmake_dep spdlog "$(echo "$work"/spdlog-*/)" -DSPDLOG_FMT_EXTERNAL=ON \
    -DSPDLOG_BUILD_EXAMPLE=OFF -DSPDLOG_BUILD_TESTS=OFF -DSPDLOG_BUILD_BENCH=OFF
  cmake_dep yaml-cpp "$(echo "$work"/yaml-cpp-*/)" -DYAML_CPP_BUILD_TESTS=OFF \
    -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_CPP_BUILD_CONTRIB=OFF -DYAML_BUILD_SHARED_LIBS=OFF
  # Debian's RE2 source leaves out its generated Unicode and Perl class tables; they are made
  # from Debian's unicode-data as its own package build does (REBUILD_TABLES).
  local re2
  re2=$(echo "$work"/re2-*/)
  (cd "$re2" && perl re2/make_perl_groups.pl >re2/perl_groups.cc &&
    python3 re2/make_unicode_casefold.py >re2/unicode_casefold.cc &&
    python3 re2/make_unicode_groups.py >re2/unicode_groups.cc)
  cmake_dep re2 "$re2" -DRE2_BUILD_TESTING=OFF
  touch "$prefix/.complete"
}

install_packages
mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9
if [ ! -e "$prefix/.complete" ]; then
  start=$(date +%s)
  build_deps
  log "dependencies built in $(( $(date +%s) - start )) s"
fi
exec 9>&-

start=$(date +%s)
cmake -S "$root" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWARMSLOT_WERROR=ON \
  -DWARMSLOT_TESTS=OFF -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DWARMSLOT_WIN_PREFIX="$prefix" >&2
cmake --build "$out" -j"$jobs" --target warmslot >&2
log "warmslot.exe built in $(( $(date +%s) - start )) s"
echo "$root/$out/proxy/warmslot.exe"
