#!/usr/bin/env bash
# The main job, for now: build, then train a small CNN on synthetic data and print the falling loss.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" >/dev/null
"$build/pactrain-demo" "$@"
