#!/usr/bin/env bash
# Fuzzes the readers of untrusted files with libFuzzer (clang-14 from Debian), each for a bounded
# time: the IDX reader, the CIFAR-10 reader, the checkpoint loader and the image decoder
# (fuzz/*_fuzzer.cpp).
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
# Builds in $FUZZ_BUILD_DIR (default build-fuzz/) with AddressSanitizer and
# UndefinedBehaviorSanitizer, starts each target from a copy of its seed corpus
# (fuzz/corpus/<target>/), and prints executions and findings per target. A finding is saved as
# build-fuzz/findings/<target>/crash-* (or leak-, timeout-, oom-); reproduce it with
# build/fuzz/pactrain-fuzz-replay-<target> FILE, fix it, and add the file to fuzz/corpus/<target>/
# so CTest replays it from then on. Exits non-zero if any target found something.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(idx cifar checkpoint image coded)
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET must be a positive integer, got '$seconds'" >&2; exit 2 ;;
esac
for t in "${targets[@]}"; do
  [ -f "$root/fuzz/${t}_fuzzer.cpp" ] || { echo "fuzz.sh: no target '$t' (idx, cifar, checkpoint, image, coded)" >&2; exit 2; }
done

"$root/scripts/setup.sh" clang-14 libclang-rt-14-dev libomp-14-dev
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPAC_FUZZ=ON -DPAC_CUDA=OFF -DPAC_DNNL=OFF -DBUILD_TESTING=OFF "-DCMAKE_CXX_FLAGS=$flags" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/pactrain-fuzz-}"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
found=0
printf '\n%-12s %14s %10s %10s %s\n' target executions "exec/s" "corpus" findings
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  cp -n "$root/fuzz/corpus/$t"/* "$corpus"/
  log="$build/fuzz-$t.log"
  # This run's findings only: those of an earlier run stay in the folder until moved to the corpus.
  started="$build/fuzz-$t.started"
  touch "$started"
  status=0
  "$build/fuzz/pactrain-fuzz-$t" "$corpus" -max_total_time="$seconds" -max_len=65536 \
    -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 -artifact_prefix="$findings/" \
    >"$log" 2>&1 || status=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  size=$(ls "$corpus" | wc -l)
  new=$(find "$findings" -maxdepth 1 -type f -newer "$started" -printf '%f ')
  if [ "$status" -ne 0 ] || [ -n "$new" ]; then
    found=1
    printf '%-12s %14s %10s %10s %s\n' "$t" "$runs" "$rate" "$size" "FOUND: $new(log: $log)"
  else
    printf '%-12s %14s %10s %10s %s\n' "$t" "$runs" "$rate" "$size" none
  fi
done
exit "$found"
