#!/usr/bin/env bash
# Every compressor on 2 ranks of this machine (no bandwidth limit): bytes sent per step, encode +
# decode time, communication not hidden behind backward, and throughput, for ResNet-18
# (small-input stem, 28x28, 1 channel) and the ViT (patch 4, dim 256, depth 6, 3 channels), on
# synthetic data. Prints a Markdown table. Usage: bench/run_compressors.sh [STEPS] [BATCH]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
steps="${1:-8}" batch="${2:-32}"

"$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
metrics="$(mktemp)"
trap 'rm -f "$metrics"' EXIT

echo "| model | compressor | bytes/step (rank 0) | vs dense | codec ms/step | exposed comm ms/step | samples/s |"
echo "|---|---|---:|---:|---:|---:|---:|"
for model in resnet18 vit; do
  if [ "$model" = resnet18 ]; then
    shape=(--model resnet18 --small-input --in-channels 1)
  else
    shape=(--model vit --in-channels 3)
  fi
  dense_bytes=""
  for spec in dense fp16 bf16 topk:ratio=0.01 randomk:ratio=0.01 terngrad powersgd:rank=2 \
              powersgd:rank=4; do
    name="${spec%%:*}" options=()
    if [ "$spec" != "$name" ]; then options=(--compress-opt "${spec#*:}"); fi
    [ "$name" = powersgd ] && options+=(--compress-opt start_iter=0)
    mpiexec --oversubscribe -n 2 "$build/pactrain" train "${shape[@]}" --data synthetic \
      --image-size 28 --synthetic-size 4096 --batch "$batch" --max-steps "$steps" --threads 1 \
      --quiet --metrics "$metrics" --log-every 1 --compress "$name" "${options[@]}"
    # Mean over the steps after the first two (warm-up).
    read -r bytes codec exposed rate < <(awk -v skip=2 '
      /"kind":"step"/ {
        n++; if (n <= skip) next
        match($0, /"bytes_sent":[0-9.e+-]+/); b += substr($0, RSTART + 13, RLENGTH - 13)
        match($0, /"codec_s":[0-9.e+-]+/); c += substr($0, RSTART + 10, RLENGTH - 10)
        match($0, /"comm_exposed_s":[0-9.e+-]+/); e += substr($0, RSTART + 17, RLENGTH - 17)
        match($0, /"samples_per_s":[0-9.e+-]+/); s += substr($0, RSTART + 16, RLENGTH - 16)
        m++
      }
      END { printf "%.0f %.3f %.3f %.1f\n", b / m, 1000 * c / m, 1000 * e / m, s / m }' "$metrics")
    [ -z "$dense_bytes" ] && dense_bytes="$bytes"
    ratio="$(awk -v a="$bytes" -v b="$dense_bytes" 'BEGIN { printf "%.3f", a / b }')"
    echo "| $model | $spec | $bytes | $ratio | $codec | $exposed | $rate |"
  done
done
