#!/usr/bin/env bash
# Configures and builds pactrain in $BUILD_DIR (default: build/). Extra arguments go to CMake,
# e.g. scripts/build.sh -DPAC_CUDA=OFF
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
