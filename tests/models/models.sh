#!/usr/bin/env bash
# Prints the path of a generated test model, generating it on first use.
#
#   tests/models/models.sh ARCH [PRESET] [SEED]     ARCH: llama | qwen35 | gemma2
#   WARMSLOT_MODELS_DIR=DIR tests/models/models.sh ...  writes into DIR instead of the cache
#                                                   PRESET: tiny (tests, default) | bench
#
# Models are written once into $WARMSLOT_CACHE/models and reused. The generator links the
# pinned llama.cpp libraries built by tests/llama/llama-server.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:?usage: models.sh ARCH [PRESET] [SEED]}
preset=${2:-tiny}
seed=${3:-1}
gen_version=3   # bump when gen-model.cpp changes what it writes

cache="${WARMSLOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmslot}"
llama_dir="$cache/llama-node-llama-cpp-3.21.1"
out_dir="${WARMSLOT_MODELS_DIR:-$cache/models}"   # override: tests check determinism
model="$out_dir/$arch-$preset-s$seed-g$gen_version.gguf"
if [ -f "$model" ]; then echo "$model"; exit 0; fi

mkdir -p "$out_dir"
exec 9>"$out_dir/.lock"
flock 9
if [ ! -f "$model" ]; then
  if [ -n "${LLAMA_SERVER:-}" ] && [ ! -d "$llama_dir/build" ]; then
    echo "models.sh: the generator needs the pinned llama.cpp build; run tests/llama/llama-server.sh without LLAMA_SERVER once" >&2
  fi
  LLAMA_SERVER="" "$here/../llama/llama-server.sh" >/dev/null
  gen="$llama_dir/build/bin/warmslot-gen-model-g$gen_version"
  if [ ! -x "$gen" ] || [ "$here/gen-model.cpp" -nt "$gen" ]; then
    echo "models.sh: building the model generator" >&2
    cmake --build "$llama_dir/build" -j"$(nproc)" --target llama >&2
    b="$llama_dir/build"
    g++ -O2 -std=c++17 "$here/gen-model.cpp" -o "$gen.tmp" \
      -I "$llama_dir/src/include" -I "$llama_dir/src/ggml/include" \
      "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" \
      "$b/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm
    mv "$gen.tmp" "$gen"
  fi
  echo "models.sh: generating $arch ($preset, seed $seed)" >&2
  "$gen" --arch "$arch" --preset "$preset" --seed "$seed" --out "$model.part"
  mv "$model.part" "$model"
fi
echo "$model"
