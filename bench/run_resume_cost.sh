#!/usr/bin/env bash
# What resuming costs: a checkpoint written by A ranks after a few steps, resumed on A ranks and
# on B ranks; each resume's `resume` record (docs/metrics.md) gives rank 0's seconds to load the
# file and map the ranks' state. ResNet-18 (224x224 images, so its 11.7M weights are full size;
# pruned to 80% with pactrain ternary and error feedback, so every rank has residuals to average)
# and gpt-mini on text (pactrain fp32, 50%).
# Usage: bench/run_resume_cost.sh TEXT_FILE [A B]   (A = 2, B = 4 by default)
#   e.g. bench/run_resume_cost.sh ../shared/data/tinyshakespeare.txt
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
[ $# -ge 1 ] || { sed -n 2,8p "$0" >&2; exit 2; }
text="$(realpath "$1")" a="${2:-2}" b="${3:-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cost() {  # cost NAME [options]: a 3-step checkpoint on A ranks, resumed on A and on B
  local name="$1"
  shift
  local common=(--global-batch 8 --threads 1 --quiet --schedule constant "$@")
  mpirun --oversubscribe -np "$a" "$build/pactrain" train "${common[@]}" --max-steps 3 \
    --checkpoint "$work/$name.safetensors" > /dev/null
  local size
  size=$(du -m "$work/$name.safetensors" | cut -f1)
  for ranks in "$a" "$b"; do
    cp "$work/$name.safetensors" "$work/resume.safetensors"
    rm -f "$work/metrics.jsonl"
    mpirun --oversubscribe -np "$ranks" "$build/pactrain" train "${common[@]}" --max-steps 3 \
      --resume "$work/resume.safetensors" --metrics "$work/metrics.jsonl" > /dev/null
    field() { grep -o "\"$1\":[0-9.e-]*" "$work/metrics.jsonl" | cut -d: -f2; }
    printf "%-10s %4s MB checkpoint of %s ranks, resumed on %s: %.3f s (load %.3f s, state %.3f s)\n" \
      "$name" "$size" "$a" "$ranks" "$(field seconds)" "$(field load_s)" "$(field state_s)"
  done
}

cost resnet18 --model resnet18 --data synthetic --synthetic-size 64 --image-size 224 \
  --prune magnitude --sparsity 0.8 --compress pactrain --compress-opt enc=ternary \
  --compress-opt ef=1
cost gpt-mini --model gpt-mini --data text --text-file "$text" --prune magnitude \
  --sparsity 0.5 --compress pactrain --compress-opt enc=fp32
