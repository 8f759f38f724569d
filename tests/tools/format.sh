#!/usr/bin/env bash
# Checks that every C++ source of proxy/ and tests/ is formatted as .clang-format says
# (clang-format, Debian's, version 14). `--fix` rewrites them instead.
# Exits non-zero, naming each file that is not.
set -euo pipefail
cd "$(dirname "$0")/../.."
format=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$format" ] || { echo "format: clang-format is not installed (deploy/install-deps.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files 'proxy/*.cpp' 'proxy/*.hpp' 'tests/*.cpp' 'tests/*.hpp')
if [ "${1:-}" = --fix ]; then
  "$format" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$format" --dry-run --Werror "$f" 2>/dev/null; then
    echo "format: $f differs from .clang-format (tests/tools/format.sh --fix)" >&2
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "format: ${#files[@]} files as .clang-format says"
exit "$bad"
