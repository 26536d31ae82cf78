#!/usr/bin/env bash
# End-to-end PacTrain check: 2 ranks train ResNet-20 on a Fashion-MNIST subset with gradual
# magnitude pruning to 80% and the pactrain compressor. The mean loss of the last 4 steps must be
# below 80% of the first 4, and the final density of the prunable weights must be 20%.
# Usage: tests/mpi_prune_train.sh PACTRAIN MPIEXEC [KEY=VALUE ...]   (pactrain options)
set -euo pipefail
pactrain="$1" mpiexec="$2"
shift 2
options=()
for kv in "$@"; do options+=(--compress-opt "$kv"); done
metrics="$(mktemp)"
trap 'rm -f "$metrics"' EXIT
"$mpiexec" --oversubscribe -n 2 "$pactrain" train --model resnet20 --data fashion-mnist \
  --train-subset 2048 --test-subset 200 --max-steps 30 --batch 32 --lr 0.05 --threads 1 --quiet \
  --metrics "$metrics" --log-every 1 --prune magnitude --sparsity 0.8 \
  --prune-schedule gradual:0:16:4 --compress pactrain "${options[@]}"
awk -F'"loss":' 'BEGIN { n = 0 }
  /"kind":"step"/ {
    split($2, a, ","); loss[n] = a[1]
    split($0, d, "\"density\":"); split(d[2], e, ","); density = e[1]; n++
  }
  END {
    if (n < 8) { print "too few step records: " n; exit 1 }
    first = (loss[0] + loss[1] + loss[2] + loss[3]) / 4
    last = (loss[n-1] + loss[n-2] + loss[n-3] + loss[n-4]) / 4
    printf "pactrain with pruning: loss %.3f -> %.3f over %d steps, final density %.4f\n", first, last, n, density
    exit !(last < 0.8 * first && density > 0.199 && density < 0.201)
  }' "$metrics"
