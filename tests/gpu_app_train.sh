#!/usr/bin/env bash
# pactrain train --device cuda, as users run it: a ResNet-20, a ViT-tiny, and a ResNet-20 pruned
# to 80% whose gradients go through the pactrain compressor's ternary coding, on synthetic data,
# checking the loss goes down; exits 77 (skipped) when there is no GPU.
set -uo pipefail
cli="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
runs=("resnet20" "vit-tiny"
  "resnet20 --prune magnitude --sparsity 0.8 --compress pactrain --compress-opt enc=ternary --compress-opt ef=1")
for run in "${runs[@]}"; do
  read -r -a extra <<<"$run"
  model="${extra[0]}"
  "$cli" train --device cuda --model "${extra[@]}" --data synthetic --synthetic-size 512 \
    --batch 64 --epochs 3 --lr 0.05 --optimizer sgd --quiet --metrics "$out" >/dev/null 2>"$out.err"
  status=$?
  if grep -q -e "no GPU is visible" -e "no CUDA backend" "$out.err"; then
    cat "$out.err"
    rm -f "$out.err"
    exit 77
  fi
  cat "$out.err"
  rm -f "$out.err"
  [ "$status" -eq 0 ] || exit "$status"
  # The first and last epoch records' training loss: it must fall.
  first=$(grep '"kind":"epoch"' "$out" | head -1 | sed 's/.*"train_loss":\([-0-9.e]*\).*/\1/')
  last=$(grep '"kind":"epoch"' "$out" | tail -1 | sed 's/.*"train_loss":\([-0-9.e]*\).*/\1/')
  echo "$run: train loss $first -> $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "loss did not fall"; exit 1; }
done
