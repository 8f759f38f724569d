#!/usr/bin/env bash
# Installs everything warmslot needs, builds it, and runs every test:
#   unit and component tests (ctest), the format and clang-tidy checks (tests/tools/), then the
#   integration tests against real llama-server
#   processes on generated models (node --test). The first run also builds the pinned
#   llama-servers (tests/llama/pins; about 6-10 minutes each on 2 cores); later runs reuse them
#   from the cache.
#   warmslot.exe is cross-built for Windows and smoke-tested under wine (windows.test.mjs);
#   WARMSLOT_SKIP_WINDOWS=1 skips that build (the test then reports itself skipped).
#   cluster.test.mjs starts deploy/cluster/cluster.sh (network namespaces and HAProxy: needs root,
#   about 15 s); WARMSLOT_SKIP_CLUSTER=1 skips it, as does a run without root or haproxy.
#   The unit and component tests run again under ASan and UBSan, and every libFuzzer target runs
#   for a bounded time over its seeds (tests/sanitizers.sh, build dir build-asan, clang; see
#   docs/testing.md); WARMSLOT_SKIP_SANITIZERS=1 skips that step, WARMSLOT_FUZZ_SECONDS sets the
#   time per fuzz target (default 10).
#   Last, the Debian package is built and tested in a clean Debian 12 root
#   (tests/package/deb-test.sh, as root); WARMSLOT_SKIP_DEB=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh --browser  # Chromium: the dashboard test drives the page
build=${WARMSLOT_BUILD_DIR:-build}
# ccache keyed by paths relative to the checkout: another clone on the same machine (a CI run)
# reuses the objects of this one, and the package build (deploy/debian/build-deb.sh) uses it too.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWARMSLOT_WERROR=ON \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$build" -j"$(nproc)"
if [ "${WARMSLOT_SKIP_WINDOWS:-0}" != 1 ]; then
  bash deploy/windows/cross-build.sh >/dev/null
fi

# Every pinned llama.cpp (tests/llama/pins): the first runs every test, the others the ground
# truth and the disk, rollback and priming tests (tests/integration/versions.test.mjs).
while read -r pin; do
  [ -n "$pin" ] && LLAMA_PIN="$pin" bash tests/llama/llama-server.sh >/dev/null
done < tests/llama/pins
for arch in llama qwen35 gemma2; do bash tests/models/models.sh "$arch" >/dev/null; done
for arch in llama qwen35; do bash tests/models/lora.sh "$arch" >/dev/null; done  # test adapters
# puppeteer-core drives the Debian Chromium: nothing is downloaded beside the npm packages.
(cd tests/integration && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)

ctest --test-dir "$build" --output-on-failure
# The sources as .clang-format says, and clang-tidy on what the last change touched.
bash tests/tools/format.sh
WARMSLOT_BUILD_DIR="$build" bash tests/tools/tidy.sh
if [ "${WARMSLOT_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash tests/sanitizers.sh
else
  echo "tests/sanitizers.sh: skipped (WARMSLOT_SKIP_SANITIZERS=1)"
fi
WARMSLOT_BIN="$PWD/$build/proxy/warmslot" node --test --test-concurrency=1 tests/integration/

if [ "${WARMSLOT_SKIP_DEB:-0}" != 1 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo bash tests/package/deb-test.sh
else
  echo "tests/package/deb-test.sh: skipped (WARMSLOT_SKIP_DEB=1)"
fi
