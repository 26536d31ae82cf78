#!/usr/bin/env bash
# The multi-rank tests and the fault-injection tests built with ThreadSanitizer (in
# $TSAN_BUILD_DIR, default build-tsan/): the communication thread, the trainer's thread, the
# watchdog and the loader all touch shared state, and a data race there is a bug no other test
# sees. OpenMPI's own internals (its progress and PMIx threads, which are not instrumented) are
# suppressed by scripts/tsan.supp, which names only OpenMPI's libraries: a report whose stacks
# hold no frame of theirs is never suppressed. Like scripts/sanitize.sh the build leaves out
# oneDNN and CUDA. Any report fails the run. Takes about 20 minutes on 2 cores (the build 15), so CI
# does not run it; run it after changing threads, waits or the process groups.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TSAN_BUILD_DIR:-$root/build-tsan}"

"$root/scripts/setup.sh"
flags="-fsanitize=thread -fno-omit-frame-pointer -g"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAC_DNNL=OFF -DPAC_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" >/dev/null
cmake --build "$build" -j "$(nproc)" --target pactrain-mpi-tests pactrain-mpi-group-faults pactrain-cli

reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
# Every process writes its reports to its own file under $reports, and exits as it would without
# TSan (exitcode=0), so the tests' own checks still apply; the run fails if any report exists.
export TSAN_OPTIONS="suppressions=$root/scripts/tsan.supp log_path=$reports/tsan exitcode=0 second_deadlock_stack=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1
mpiexec --oversubscribe -x TSAN_OPTIONS -n 2 "$build/tests/pactrain-mpi-tests"
mpiexec --oversubscribe -x TSAN_OPTIONS -n 2 "$build/tests/pactrain-mpi-group-faults" after-mismatch
MPI_FAULTS_TIME_FACTOR=10 "$root/tests/mpi_faults.sh" "$build/pactrain" mpiexec

if compgen -G "$reports/tsan*" >/dev/null; then
  cat "$reports"/tsan* >&2
  echo "thread sanitizer: $(cat "$reports"/tsan* | grep -c '^WARNING: ThreadSanitizer') reports" >&2
  exit 1
fi
echo "thread sanitizer: no reports"
