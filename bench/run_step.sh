#!/usr/bin/env bash
# Training-step time of ResNet-20, ResNet-18 (small-input stem) and the ViT (patch 4, dim 256,
# depth 6, 8 heads) on 28x28 inputs, batch 64, in pactrain and in PyTorch on this machine, one
# thread each by default. Prints a Markdown table; ratio = ours / PyTorch (lower is better).
# Usage: bench/run_step.sh [--threads N] [--steps S] [--batch B] [--models a,b,c]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torch python3-torchvision  # the PyTorch peer
threads=1
for ((i = 1; i <= $#; i++)); do
  [ "${!i}" = "--threads" ] && { j=$((i + 1)); threads="${!j}"; }
done
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"

ours="$(mktemp)" peer="$(mktemp)"
trap 'rm -f "$ours" "$peer"' EXIT
"$build/bench-step" "$@" >"$ours"
/usr/bin/python3 "$root/bench/peers/torch_step.py" "$@" >"$peer"
echo "| model | pactrain s/step | PyTorch s/step | ratio |"
echo "|---|---:|---:|---:|"
join <(sort "$ours") <(sort "$peer") | awk '{ printf "| %s | %.4f | %.4f | %.2f |\n", $1, $2, $3, $2 / $3 }'
echo
echo "threads: $threads; PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
