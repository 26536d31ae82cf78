#!/usr/bin/env bash
# The PacTrain compressor's cost and savings on 2 ranks of this machine: for ResNet-20 (28x28, 1
# channel), ResNet-18 (small-input stem, 28x28, 1 channel) and the ViT (patch 4, 28x28, 3
# channels) on synthetic data, it compares the unpruned model with dense all-reduce against
# pactrain in fp32, bf16 and ternary on the model pruned once at step 0 to SPARSITY with
# layer-wise magnitude: bytes each rank sent per step (measured by the process group), encode and
# decode time and its share of the step, the passes over gradient memory per step (measured where
# kernels take a pointer into a bucket, from the weight gradient's accumulation to the update),
# the allocations per step and the step time against dense's. Means over the steps after the
# first two. Prints a Markdown table, then the gradient and optimizer memory (bench-grad-memory,
# SGD with momentum, global magnitude at 80% and 90%).
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

echo "| model | compressor | bytes/step | vs dense | codec ms/step | share of step | gradient passes/step | allocations/step | samples/s | step time vs dense |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for model in resnet20 resnet18 vit; do
  case "$model" in
    resnet20) shape=(--model resnet20 --in-channels 1) ;;
    resnet18) shape=(--model resnet18 --small-input --in-channels 1) ;;
    vit) shape=(--model vit --in-channels 3) ;;
  esac
  dense_bytes="" dense_step=""
  for spec in dense pactrain:fp32 pactrain:bf16 pactrain:ternary; do
    name="${spec%%:*}" options=() prune=()
    [ "$spec" != "$name" ] && options=(--compress-opt "enc=${spec#*:}")
    [ "$name" = pactrain ] &&
      prune=(--prune magnitude --sparsity "$sparsity" --prune-schedule oneshot:0)
    mpiexec --oversubscribe -n 2 "$build/pactrain" train "${shape[@]}" --data synthetic \
      --image-size 28 --synthetic-size 4096 --batch "$batch" --max-steps "$steps" --threads 1 \
      --quiet --metrics "$metrics" --log-every 1 --compress "$name" "${options[@]}" "${prune[@]}"
    row="$(/usr/bin/python3 - "$metrics" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in steps if r["kind"] == "step"][2:]
mean = lambda key: sum(r[key] for r in steps) / len(steps)
print(f"{mean('bytes_sent'):.0f} {1000 * mean('codec_s'):.3f} "
      f"{100 * mean('codec_s') / mean('step_s'):.2f}% {mean('gradient_passes'):.1f} "
      f"{mean('allocations'):.1f} {mean('samples_per_s'):.0f} {mean('step_s'):.5f}")
PY
)"
    read -r bytes codec share passes allocations rate step <<< "$row"
    [ -z "$dense_bytes" ] && dense_bytes="$bytes" dense_step="$step"
    ratio="$(awk -v a="$bytes" -v b="$dense_bytes" 'BEGIN { printf "%.4f", a / b }')"
    step_ratio="$(awk -v a="$step" -v b="$dense_step" 'BEGIN { printf "%.2f", a / b }')"
    echo "| $model | $spec | $bytes | $ratio | $codec | $share | $passes | $allocations | $rate | $step_ratio |"
  done
done

echo
echo "Gradient and optimizer memory after one step, read from the allocator (SGD with momentum):"
echo
echo "| model | sparsity | bytes | vs dense |"
echo "|---|---:|---:|---:|"
"$build/bench-grad-memory" --models resnet18,vit --sparsities 0.8,0.9 |
  while read -r model sparsity bytes ratio; do echo "| $model | $sparsity | $bytes | $ratio |"; done
