#!/usr/bin/env bash
# clang-tidy (.clang-tidy's checks, warnings as errors) on the sources of proxy/ that changed
# since BASE (default: the last commit's parent, so CI checks what the last change touched;
# give an older commit to check a whole series). Needs the build's compile_commands.json
# (WARMSLOT_BUILD_DIR, default build). Headers are checked through the sources that include
# them.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:-HEAD~1}
build=${WARMSLOT_BUILD_DIR:-build}
tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
[ -n "$tidy" ] || { echo "tidy: clang-tidy is not installed (deploy/install-deps.sh)" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "tidy: no $build/compile_commands.json" >&2; exit 1; }
git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "tidy: no commit $base: nothing to compare"; exit 0; }
# Sources built on this platform only (the Windows seams are checked by their cross build).
mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- 'proxy/*.cpp' 'proxy/*.hpp' |
  while read -r f; do
    case "$f" in
      *_windows.cpp) ;;
      *.cpp) echo "$f" ;;
      # A changed header: the sources that include it.
      *.hpp) grep -l "#include \"${f#proxy/}\"" proxy/*/*.cpp 2>/dev/null | grep -v _windows.cpp || true ;;
    esac
  done | sort -u)
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: no source of proxy/ changed since $base"
  exit 0
fi
echo "tidy: ${#files[@]} sources changed since $base"
printf '%s\n' "${files[@]}" | xargs -P"$(nproc)" -n1 "$tidy" -p "$build" --quiet
echo "tidy: clean"
