#!/usr/bin/env bash
# Installs everything, builds warmslot and starts it in front of a llama-server, then shows a
# request going through and what the cache did with it. Runs in the foreground; Ctrl-C stops
# warmslot and any llama-server this script started.
#
#   bash deploy/run.sh                      demo: pinned llama-server + a generated demo model
#   bash deploy/run.sh --config FILE        your own config (your llama-server backends)
#   LLAMA_SERVER=/path/llama-server MODEL=/path/model.gguf bash deploy/run.sh
#                                           your llama-server binary and model, started here
#   WARMSLOT_LISTEN=127.0.0.1:8080          where warmslot listens (default)
set -euo pipefail
cd "$(dirname "$0")/.."

config=""
if [ "${1:-}" = "--config" ]; then config=${2:?--config needs a file}; fi

# Only what building and running needs: no test tools, no web servers that start on install.
bash deploy/install-deps.sh --run
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWARMSLOT_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target warmslot

work=$(mktemp -d /tmp/warmslot-run.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

listen=${WARMSLOT_LISTEN:-127.0.0.1:8080}
if [ -z "$config" ]; then
  server=$(bash tests/llama/llama-server.sh)
  model=${MODEL:-}
  if [ -z "$model" ]; then
    model=$(bash tests/models/models.sh llama tiny)
    echo "No MODEL given: using the generated demo model (random weights, the text is nonsense)."
  fi
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  mkdir -p "$work/slots"
  "$server" -m "$model" --host 127.0.0.1 --port "$port" -np 2 -c 32768 --metrics \
    --slot-save-path "$work/slots" >"$work/llama-server.log" 2>&1 &
  pids+=($!)
  echo "Starting llama-server on 127.0.0.1:$port (log: $work/llama-server.log) ..."
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$work/llama-server.log"; exit 1; }
    sleep 0.2
  done
  config="$work/warmslot.yaml"
  cat >"$config" <<YAML
listen: $listen
backends:
  - name: local
    url: http://127.0.0.1:$port
    slot_save_path: $work/slots
YAML
fi

build/proxy/warmslot check-config "$config"
build/proxy/warmslot --config "$config" > >(tee "$work/warmslot.out") 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  grep -q "warmslot listening on" "$work/warmslot.out" 2>/dev/null && break
  sleep 0.1
done
url=$(grep -o "http://[^ ]*" "$work/warmslot.out" | head -1)
[ -n "$url" ] || { echo "warmslot did not start"; exit 1; }
node deploy/demo-client.mjs "$url" || true
echo
echo "warmslot is running at $url (OpenAI base URL: $url/v1). Press Ctrl-C to stop."
wait "${pids[-1]}"
