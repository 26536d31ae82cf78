#!/usr/bin/env bash
# End-to-end data-parallel check: 2 ranks train ResNet-20 on a Fashion-MNIST subset with the given
# compressor, and the mean loss of the last 4 steps must be below 80% of the first 4; with
# MAX_TEST_LOSS in the environment, the test loss of the last evaluation must be below it too.
# Usage: tests/mpi_train.sh PACTRAIN MPIEXEC COMPRESSOR [KEY=VALUE ...] [-- TRAIN OPTION ...]
#        (compressor options, then options of `pactrain train`, e.g. -- --sync diloco:4)
set -euo pipefail
pactrain="$1" mpiexec="$2" compressor="$3"
shift 3
options=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=(--compress-opt "$1"); shift; done
[ $# -gt 0 ] && shift  # the --
options+=("$@")
metrics="$(mktemp)"
trap 'rm -f "$metrics"' EXIT
"$mpiexec" --oversubscribe -n 2 "$pactrain" train --model resnet20 --data fashion-mnist \
  --train-subset 2048 --test-subset 200 --max-steps 24 --batch 32 --lr 0.05 --threads 1 --quiet \
  --metrics "$metrics" --log-every 1 --compress "$compressor" "${options[@]}"
awk -F'"loss":' '/"kind":"step"/ { split($2, a, ","); loss[n++] = a[1] }
  END {
    if (n < 8) { print "too few step records: " n; exit 1 }
    first = (loss[0] + loss[1] + loss[2] + loss[3]) / 4
    last = (loss[n-1] + loss[n-2] + loss[n-3] + loss[n-4]) / 4
    printf "'"$compressor"': loss %.3f -> %.3f over %d steps\n", first, last, n
    exit !(last < 0.8 * first)
  }' "$metrics"
# The epoch record's bytes per step cover every step: with --log-every 1 (every step recorded),
# the mean of the step records' bytes, synchronising steps and the others alike.
awk '/"kind":"step"/ { match($0, /"bytes_sent":[0-9.e+]*/); sum += substr($0, RSTART + 13, RLENGTH - 13); n++ }
  /"kind":"epoch"/ { match($0, /"bytes_per_step":[0-9.e+]*/); epoch = substr($0, RSTART + 17, RLENGTH - 17) }
  END {
    mean = sum / n
    printf "bytes per step: epoch record %.1f, steps %.1f\n", epoch, mean
    exit !(epoch != "" && (epoch - mean) ^ 2 <= (1e-6 * mean) ^ 2 + 1e-6)
  }' "$metrics"
# The CPU the steps used is measured, and the communication thread's is part of it.
awk '/"kind":"step"/ {
    match($0, /"cpu_s":[0-9.e+-]*/); cpu += substr($0, RSTART + 8, RLENGTH - 8)
    match($0, /"communication_cpu_s":[0-9.e+-]*/); comm += substr($0, RSTART + 22, RLENGTH - 22) }
  END {
    printf "CPU of the steps: %.3f s, of which the communication thread %.3f s\n", cpu, comm
    exit !(comm > 0 && comm < cpu)
  }' "$metrics"
if [ -n "${MAX_TEST_LOSS:-}" ]; then
  awk -v most="$MAX_TEST_LOSS" '/"kind":"epoch"/ {
      match($0, /"test_loss":[0-9.e+-]*/); loss = substr($0, RSTART + 12, RLENGTH - 12) }
    END {
      printf "test loss %s (at most %s)\n", loss, most
      exit !(loss != "" && loss + 0 < most + 0)
    }' "$metrics"
fi
