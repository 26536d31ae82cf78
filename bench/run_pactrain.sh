#!/usr/bin/env bash
# The PacTrain compressor's cost and savings on 2 ranks of this machine: for ResNet-20 (28x28, 1
# channel), ResNet-18 (small-input stem, 28x28, 1 channel) and the ViT (patch 4, 28x28, 3
# channels) on synthetic data, pruned once at step 0 to SPARSITY with layer-wise magnitude, it
# compares dense all-reduce with pactrain in fp32, bf16 and ternary: bytes each rank sent per step
# (measured by the process group), pack+unpack time and its share of the step, the compressor's
# passes over gradient data ("kernels") and the allocations per step. Means over the steps after
# the first two. Prints a Markdown table.
# Usage: bench/run_pactrain.sh [SPARSITY] [STEPS] [BATCH]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
sparsity="${1:-0.8}" steps="${2:-10}" batch="${3:-32}"

"$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
metrics="$(mktemp)"
trap 'rm -f "$metrics"' EXIT

echo "| model | compressor | bytes/step | vs dense | pack+unpack ms/step | share of step | kernels/step | allocations/step | samples/s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for model in resnet20 resnet18 vit; do
  case "$model" in
    resnet20) shape=(--model resnet20 --in-channels 1) ;;
    resnet18) shape=(--model resnet18 --small-input --in-channels 1) ;;
    vit) shape=(--model vit --in-channels 3) ;;
  esac
  dense_bytes=""
  for spec in dense pactrain:fp32 pactrain:bf16 pactrain:ternary; do
    name="${spec%%:*}" options=()
    [ "$spec" != "$name" ] && options=(--compress-opt "enc=${spec#*:}")
    mpiexec --oversubscribe -n 2 "$build/pactrain" train "${shape[@]}" --data synthetic \
      --image-size 28 --synthetic-size 4096 --batch "$batch" --max-steps "$steps" --threads 1 \
      --quiet --metrics "$metrics" --log-every 1 --compress "$name" "${options[@]}" \
      --prune magnitude --sparsity "$sparsity" --prune-schedule oneshot:0
    row="$(/usr/bin/python3 - "$metrics" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in steps if r["kind"] == "step"][2:]
mean = lambda key: sum(r[key] for r in steps) / len(steps)
print(f"{mean('bytes_sent'):.0f} {1000 * mean('codec_s'):.3f} "
      f"{100 * mean('codec_s') / mean('step_s'):.2f}% {mean('codec_kernels'):.1f} "
      f"{mean('allocations'):.1f} {mean('samples_per_s'):.0f}")
PY
)"
    read -r bytes codec share kernels allocations rate <<< "$row"
    [ -z "$dense_bytes" ] && dense_bytes="$bytes"
    ratio="$(awk -v a="$bytes" -v b="$dense_bytes" 'BEGIN { printf "%.4f", a / b }')"
    echo "| $model | $spec | $bytes | $ratio | $codec | $share | $kernels | $allocations | $rate |"
  done
done
