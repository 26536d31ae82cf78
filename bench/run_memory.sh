#!/usr/bin/env bash
# Peak memory of a pruned run against the dense one, as a user meets it: the process's peak
# resident set (`/usr/bin/time -f %M`) of one process training a few steps and evaluating, for
# ResNet-18 (small-input stem) on Fashion-MNIST with SGD and momentum, and gpt-mini on a text
# file with AdamW; 80% magnitude pruning at step 0. Prints a Markdown table.
# Usage: bench/run_memory.sh [TEXT_FILE] [PACTRAIN_BINARY]
# (TEXT_FILE defaults to ../shared/data/tinyshakespeare.txt; the binary to build/pactrain.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
text="${1:-$root/../shared/data/tinyshakespeare.txt}"
bin="${2:-}"
if [ -z "$bin" ]; then
  "$root/scripts/build.sh" >/dev/null
  bin="${BUILD_DIR:-$root/build}/pactrain"
fi
[ -f "$text" ] || { echo "run_memory.sh: no text file at $text (pass one)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "run_memory.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
peak_mb() {  # the peak resident set of one run, in MB
  /usr/bin/time -f "%M" -o "$out" "$@" >/dev/null 2>&1
  echo $(($(tail -1 "$out") / 1000))
}

resnet=("$bin" train --model resnet18 --small-input --data fashion-mnist --batch 32 --threads 1
  --max-steps 8 --train-subset 512 --epochs 1)
gpt=("$bin" train --model gpt-mini --data text --text-file "$text" --batch 4 --threads 1
  --max-steps 8 --epochs 1 --optimizer adamw --lr 1e-3 --eval-iters 4)
prune=(--prune magnitude --sparsity 0.8)

echo "| model | run | peak RSS (MB) |"
echo "|---|---|---:|"
echo "| resnet18 | dense | $(peak_mb "${resnet[@]}") |"
echo "| resnet18 | pactrain, no pruning | $(peak_mb "${resnet[@]}" --compress pactrain) |"
echo "| resnet18 | dense, 80% magnitude (layer) | $(peak_mb "${resnet[@]}" "${prune[@]}") |"
echo "| resnet18 | pactrain, 80% magnitude (layer) | $(peak_mb "${resnet[@]}" --compress pactrain "${prune[@]}") |"
echo "| resnet18 | pactrain, 80% random | $(peak_mb "${resnet[@]}" --compress pactrain --prune random --sparsity 0.8) |"
echo "| resnet18 | pactrain, 80% magnitude (global) | $(peak_mb "${resnet[@]}" --compress pactrain "${prune[@]}" --prune-scope global) |"
echo "| gpt-mini | dense | $(peak_mb "${gpt[@]}") |"
echo "| gpt-mini | pactrain, 80% magnitude | $(peak_mb "${gpt[@]}" --compress pactrain "${prune[@]}") |"
