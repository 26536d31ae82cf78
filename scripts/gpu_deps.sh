#!/usr/bin/env bash
# Fetches, on this machine (which has apt), the Debian packages that the GPU build needs into
# .deps/debs (ignored by git), for a GPU machine that has CUDA, CMake, ninja and Python but no apt
# and none of these -dev packages. scripts/gpu_check.sh unpacks them there into a private prefix
# (.deps/root) and points CMake at it. Carry .deps/debs to the GPU machine (not all of .deps,
# which also holds the unpacked prefix after a local check: 120 MB).
# The GPU build needs no MPI and no oneDNN (-DPAC_MPI=OFF -DPAC_DNNL=OFF).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs="$root/.deps/debs"
packages=(libfmt-dev libfmt9 doctest-dev libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread
  libopenblas0 libgfortran5 libquadmath0 zlib1g-dev zlib1g libcli11-dev nlohmann-json3-dev)
mkdir -p "$debs"
cd "$debs"
if ! apt-get download "${packages[@]}" >/dev/null 2>&1; then
  apt-get update -qq
  apt-get download "${packages[@]}" >/dev/null
fi
echo "gpu_deps: $(ls "$debs" | wc -l) packages, $(du -sh "$debs" | cut -f1), in $debs"
