#!/usr/bin/env bash
# --data imagefolder end to end on the build's fixture folders (tests/fixtures/make_image_folder.py):
# a ResNet trains from a folder of JPEGs and PNGs and writes data_wait_s; its checkpoint keeps the
# classes, so `pactrain eval` reads the folder alike and refuses one of other classes; a corrupt
# file stops the run naming it, or is skipped and reported; and on 2 ranks each step's global
# batch is the 1-rank run's, sample for sample.
# Usage: tests/image_folder_train.sh PACTRAIN FIXTURE_DIR MPIEXEC|none
set -euo pipefail
pactrain="$1" fixture="$2" mpiexec="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
folder="$fixture/folder"
run=(--model resnet20 --data imagefolder --image-size 32 --threads 1 --seed 4 --lr 0.05)

fails() {  # EXPECTED-TEXT COMMAND...: the command must fail and say EXPECTED-TEXT on stderr
  local expected="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then
    echo "accepted: $*"; exit 1
  fi
  if ! grep -qF -- "$expected" "$work/err"; then
    echo "expected '$expected' from: $*"; cat "$work/err"; exit 1
  fi
}

"$pactrain" train "${run[@]}" --global-batch 8 --data-dir "$folder" --epochs 2 --metrics "$work/one.jsonl" \
  --checkpoint "$work/model.safetensors" | tee "$work/log"
grep -q "image folder: 3 classes, 9 validation images; 32x32 inputs" "$work/log"
grep -q "image folder: skipped 2 files that are not JPEG or PNG" "$work/log"
grep -q '"data_wait_s":' "$work/one.jsonl"
grep '"kind":"epoch"' "$work/one.jsonl" | grep -q '"test_acc"'
# The metrics file reruns the run: the recipe it recorded holds the folder's options.
"$pactrain" train --config "$work/one.jsonl" --max-steps 1 --normalize-mean 0.5 0.5 0.5 \
  --normalize-std 0.25 0.25 0.25 --print-config | grep -q "normalize-std = \[0.25, 0.25, 0.25\]"

"$pactrain" eval --checkpoint "$work/model.safetensors" --data imagefolder --data-dir "$folder" |
  tee "$work/eval"
grep -q "on $folder/val: 9 images, loss [0-9.]*, accuracy [0-9.]*%" "$work/eval"
# The corrupt fixture has the classes ant and bee: not the model's three.
fails "the model's 3 classes are not $fixture/corrupt's 2" \
  "$pactrain" eval --checkpoint "$work/model.safetensors" --data imagefolder --data-dir "$fixture/corrupt"
fails "class 'bee' is in $fixture/missing_val/train but not in $fixture/missing_val/val" \
  "$pactrain" train "${run[@]}" --data-dir "$fixture/missing_val"
fails "has no images" "$pactrain" train "${run[@]}" --data-dir "$fixture/empty_class"
fails "--data imagefolder needs --data-dir DIR" "$pactrain" train "${run[@]}"

# Corrupt files: an error naming the file, or with --skip-corrupt-images a line that counts them.
corrupt=("${run[@]}" --data-dir "$fixture/corrupt" --global-batch 7 --epochs 1)
fails "$fixture/corrupt/train/" "$pactrain" train "${corrupt[@]}"
"$pactrain" train "${corrupt[@]}" --skip-corrupt-images 2>"$work/err" >/dev/null
grep -q "rank 0: --skip-corrupt-images: [0-9]* training images could not be decoded" "$work/err"

[ "$mpiexec" = none ] && exit 0
# 2 ranks with 4 images each: every step the same 8 images as 1 rank with all 8.
steps=(--global-batch 8 --max-steps 3 --epochs 1)
PACTRAIN_TRACE_SAMPLES="$work/one" "$pactrain" train "${run[@]}" --data-dir "$folder" "${steps[@]}" \
  --quiet
PACTRAIN_TRACE_SAMPLES="$work/two" "$mpiexec" --oversubscribe -n 2 "$pactrain" train "${run[@]}" \
  --data-dir "$folder" "${steps[@]}" --quiet
/usr/bin/python3 - "$work" <<'EOF'
import sys
work = sys.argv[1]
def steps(paths):
    out = {}
    for path in paths:
        for line in open(path):
            step, samples = line.split(":")
            out.setdefault(int(step), []).extend(int(s) for s in samples.split())
    return {k: sorted(v) for k, v in out.items()}
one, two = steps([f"{work}/one.rank0"]), steps([f"{work}/two.rank0", f"{work}/two.rank1"])
print("1 rank:", one, "\n2 ranks:", two)
sys.exit(0 if one == two and len(one) == 3 else "the global batches differ")
EOF
