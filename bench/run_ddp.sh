#!/usr/bin/env bash
# Data-parallel training-step time on N ranks of this machine (default 2, one thread each):
# pactrain under mpiexec with the dense all-reduce against PyTorch DDP on gloo, same models, same
# per-rank batch. Prints a Markdown table; ratio = ours / PyTorch (lower is better).
# Usage: bench/run_ddp.sh [RANKS] [STEPS] [BATCH] [MODELS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
ranks="${1:-2}" steps="${2:-10}" batch="${3:-64}" models="${4:-resnet20,resnet18,vit}"

"$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torch python3-torchvision  # the PyTorch DDP peer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
ours="$(mktemp)" peer="$(mktemp)"
trap 'rm -f "$ours" "$peer"' EXIT
mpiexec --oversubscribe -n "$ranks" "$build/bench-step" --threads 1 --steps "$steps" \
  --batch "$batch" --models "$models" >"$ours"
/usr/bin/python3 "$root/bench/peers/torch_ddp.py" --ranks "$ranks" --steps "$steps" \
  --batch "$batch" --models "$models" >"$peer"
echo "| model | pactrain s/step | PyTorch DDP s/step | ratio |"
echo "|---|---:|---:|---:|"
join <(sort "$ours") <(sort "$peer") | awk '{ printf "| %s | %.4f | %.4f | %.2f |\n", $1, $2, $3, $2 / $3 }'
echo
echo "$ranks ranks, batch $batch per rank, one thread each; PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') DDP on gloo"
