#!/usr/bin/env bash
# Prints the path of a random LoRA adapter for a generated test model, generating it on first
# use (next to the model, in the same cache).
#
#   tests/models/lora.sh ARCH [PRESET] [SEED]     ARCH, PRESET: as models.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?usage: lora.sh ARCH [PRESET] [SEED]}
preset=${2:-tiny}
seed=${3:-1}
lora_version=2   # bump when gen-lora.cpp changes what it writes

model=$("$here/models.sh" "$arch" "$preset")
cache="${WARMSLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmslot}"
llama_dir="$cache/llama-node-llama-cpp-3.21.1"
out="${model%.gguf}-lora-s$seed-v$lora_version.gguf"
if [ -f "$out" ]; then echo "$out"; exit 0; fi

exec 9>"$(dirname "$model")/.lock"
flock 9
if [ ! -f "$out" ]; then
  gen="$llama_dir/build/bin/warmslot-gen-lora-v$lora_version"
  if [ ! -x "$gen" ] || [ "$here/gen-lora.cpp" -nt "$gen" ]; then
    echo "lora.sh: building the adapter generator" >&2
    b="$llama_dir/build"
    g++ -O2 -std=c++17 "$here/gen-lora.cpp" -o "$gen.tmp" \
      -I "$llama_dir/src/ggml/include" \
      "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
      -fopenmp -lpthread -ldl -lm
    mv "$gen.tmp" "$gen"
  fi
  echo "lora.sh: generating an adapter for $arch ($preset, seed $seed)" >&2
  "$gen" --model "$model" --seed "$seed" --out "$out"
fi
echo "$out"
