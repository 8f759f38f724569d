#!/usr/bin/env bash
# The layers of proxy/: each folder may include its own headers and those of the folders listed
# for it here, never one above it. The table follows the libraries of proxy/CMakeLists.txt
# (each folder one library, linking only to those below); docs/architecture.md draws it.
# Exits non-zero, naming each include that breaks it.
set -euo pipefail
cd "$(dirname "$0")/../../proxy"

declare -A below=(
  [util]=""
  [net]=""
  [sse]=""
  [cache]=""
  [config]="util"
  [api]="util config sse"
  [routing]="util api"
  [rewrite]="util api config"
  [status]="util config routing cache"
  [upstream]="util net config api"
  [tier]="util net config api routing cache upstream"
  [http]="util net config api"
  [monitor]="util net config api routing cache upstream"
  [endpoints]="util net config api routing cache status tier upstream http"
  [service]="util net config api sse routing cache rewrite status tier upstream http endpoints"
  [app]="util net config api sse routing cache rewrite status tier upstream http endpoints monitor service"
)

bad=0
for dir in */; do
  dir=${dir%/}
  if [ -z "${below[$dir]+set}" ]; then
    echo "layers: proxy/$dir/ has no place in tests/tools/layers.sh" >&2
    bad=1
    continue
  fi
  while IFS=: read -r file line text; do
    target=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"$text")
    [ "$target" = "$dir" ] && continue
    case " ${below[$dir]} " in
      *" $target "*) ;;
      *) echo "layers: proxy/$file:$line includes $target/, above or beside $dir/" >&2; bad=1 ;;
    esac
  done < <(grep -nH -E '^#include "[a-z_]+/' "$dir"/*.cpp "$dir"/*.hpp 2>/dev/null || true)
done
[ "$bad" = 0 ] && echo "layers: every include of proxy/ points down"
exit "$bad"
