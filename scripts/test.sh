#!/usr/bin/env bash
# The whole test suite on a fresh machine: install packages, configure, build, run CTest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" "$@"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
