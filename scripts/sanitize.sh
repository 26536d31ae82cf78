#!/usr/bin/env bash
# The unit tests and the 2-rank tests again, built with AddressSanitizer and
# UndefinedBehaviorSanitizer (in $SANITIZE_BUILD_DIR, default build-asan/), and the fuzz targets
# over their saved corpus (fuzz/corpus/). The build leaves
# oneDNN out (its JIT-generated code is not instrumented), so the im2col convolution runs, and
# CUDA out (there is no GPU to run it), which also keeps the CPU-only build compiling; leak
# checking is off because MPI and OpenBLAS keep allocations to the end of the process by design.
# Any finding fails the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SANITIZE_BUILD_DIR:-$root/build-asan}"

"$root/scripts/setup.sh"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAC_DNNL=OFF -DPAC_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)" --target pactrain-tests pactrain-mpi-tests \
  pactrain-fuzz-replay-idx pactrain-fuzz-replay-cifar pactrain-fuzz-replay-checkpoint \
  pactrain-fuzz-replay-image pactrain-fuzz-replay-coded

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
"$build/tests/pactrain-tests"
for target in idx cifar checkpoint image coded; do
  "$build/fuzz/pactrain-fuzz-replay-$target" "$root/fuzz/corpus/$target"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpiexec --oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS -n 2 "$build/tests/pactrain-mpi-tests"
echo "sanitizers: no findings"
