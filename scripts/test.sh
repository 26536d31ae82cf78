#!/usr/bin/env bash
# The whole test suite on a fresh machine: install packages, configure, build, run CTest; then
# the unit and 2-rank tests again under AddressSanitizer and UndefinedBehaviorSanitizer
# (scripts/sanitize.sh). --no-sanitize skips that second pass; other arguments go to CMake.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
sanitize=1
args=()
for a in "$@"; do
  if [ "$a" = --no-sanitize ]; then sanitize=0; else args+=("$a"); fi
done

"$root/scripts/build.sh" "${args[@]+"${args[@]}"}"
(cd "$build" && ctest --output-on-failure -j "$(nproc)")
if [ "$sanitize" -eq 1 ]; then "$root/scripts/sanitize.sh"; fi
