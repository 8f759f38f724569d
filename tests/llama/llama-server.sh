#!/usr/bin/env bash
# Prints the path of a llama-server binary, building it first if needed.
#
#   LLAMA_SERVER=/path/to/llama-server  use that binary as it is
#   otherwise                           CPU build of the llama.cpp source that the npm package
#                                       $LLAMA_PIN ships (llama/gitRelease.bundle)
#   LLAMA_PIN=node-llama-cpp@X.Y.Z      which one (default: the first line of tests/llama/pins;
#                                       the tests run the ground truth on every pin listed there)
#
# The build lives in $WARMSLOT_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/warmslot), keyed by the
# pinned version, so only the first run compiles. Progress goes to stderr; stdout is the path.
set -euo pipefail

if [ -n "${LLAMA_SERVER:-}" ]; then
  [ -x "$LLAMA_SERVER" ] || { echo "LLAMA_SERVER=$LLAMA_SERVER is not an executable" >&2; exit 1; }
  echo "$LLAMA_SERVER"
  exit 0
fi

pin="${LLAMA_PIN:-$(head -n 1 "$(dirname "$0")/pins")}"
[[ "$pin" =~ ^node-llama-cpp@[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  { echo "LLAMA_PIN=$pin: expected node-llama-cpp@X.Y.Z" >&2; exit 1; }
cache="${WARMSLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmslot}"
dir="$cache/llama-${pin//@/-}"
bin="$dir/build/bin/llama-server"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9
if [ ! -x "$bin" ]; then
  start=$(date +%s)
  work=$(mktemp -d "$dir/tmp.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "llama-server: fetching $pin from npm" >&2
  (cd "$work" && npm pack --silent "$pin" >/dev/null)
  tar -xzf "$work"/node-llama-cpp-*.tgz -C "$work" package/llama/gitRelease.bundle
  rm -rf "$dir/src"
  git clone -q "$work/package/llama/gitRelease.bundle" "$dir/src" >&2
  echo "llama-server: building (about 6 minutes on 2 cores)" >&2
  cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF >&2
  cmake --build "$dir/build" -j"$(nproc)" --target llama-server >&2
  echo "llama-server: built in $(( $(date +%s) - start )) s" >&2
fi
echo "$bin"
