#!/usr/bin/env bash
# Builds the GPU check's three programs here (Release, CUDA for --arch, default 90: the H100 and
# H200) and packs them with the shared libraries they need beyond glibc, libstdc++ and CUDA's
# into .deps/prebuilt and .deps/prebuilt.tar.gz (ignored by git; about 15 MB packed), so that a
# lent GPU machine with the same CUDA major version spends none of its minutes compiling: carry
# the archive there and run `scripts/gpu_check.sh --prebuilt .deps/prebuilt.tar.gz`. Also
# fetches .deps/debs (scripts/gpu_deps.sh), so that the check can still build there if the packed
# programs cannot start.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
arch=90
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    *) echo "gpu_pack: unknown option '$1' (expected --arch SM)" >&2; exit 2 ;;
  esac
done
build="${BUILD_DIR:-$root/build-gpu}"
pack="$root/.deps/prebuilt"
"$root/scripts/gpu_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAC_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DPAC_MPI=OFF -DPAC_DNNL=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target pactrain-gpu-tests pactrain-cli bench-gpu-step
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
for program in tests/pactrain-gpu-tests pactrain bench-gpu-step; do
  cp "$build/$program" "$pack/bin/"
  strip --strip-debug "$pack/bin/$(basename "$program")"
done
# Every library the programs load from the system's folders, except the C and C++ runtimes
# (any machine has them, newer) and CUDA's own (the GPU machine's toolkit brings them).
ldd "$pack"/bin/* | awk '$3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libstdc++* | libgcc_s* | ld-linux* | libpthread* | libdl* | librt*) ;;
    libcu* | libnccl* | libnv*) ;;
    *) cp -L "$lib" "$pack/lib/" ;;
  esac
done
tar -czf "$pack.tar.gz" -C "$(dirname "$pack")" "$(basename "$pack")"
echo "gpu_pack: $(ls "$pack/bin" | wc -l) programs, libraries $(ls "$pack/lib" | tr '\n' ' ')," \
  "$(du -sh "$pack.tar.gz" | cut -f1) in $pack.tar.gz (sm_$arch)"
