#!/usr/bin/env bash
# Recipes as users run them: every file in apps/recipes trains for a few steps on one rank; a
# run's metrics file and its checkpoint each rerun it with the same loss at every step, bit for
# bit; and recipes that are wrong are refused with the key named.
# Usage: tests/recipes.sh PACTRAIN RECIPE_DIR IMAGE_FOLDER (the build's fixture folder, on which
# the image-folder recipes train at 64x64)
set -euo pipefail
pactrain="$1" recipes="$2" image_folder="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A small text for the GPT recipe (its own data, Debian's fortunes, may not be installed).
awk 'BEGIN { for (i = 0; i < 300; i++) printf "the cat %d sat on the mat.\n", i % 9 }' > "$work/text.txt"
for recipe in "$recipes"/*.toml; do
  small=(--train-subset 512 --test-subset 200)
  grep -q '^data = "fortunes"' "$recipe" && small=(--data text --text-file "$work/text.txt" --eval-iters 2)
  grep -q '^data = "imagefolder"' "$recipe" &&
    small=(--data-dir "$image_folder" --image-size 64 --global-batch 8 --epochs 1)
  "$pactrain" train --config "$recipe" --max-steps 3 --threads 2 --quiet "${small[@]}" \
    --metrics "$work/run.jsonl" || fail "$recipe does not train"
  grep -q '"kind":"step"' "$work/run.jsonl" || fail "$recipe wrote no step record"
  echo "ok: $(basename "$recipe") trains"
done

# The losses of a metrics file's step records, one per line, as written.
losses() { grep '"kind":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
"$pactrain" train --config "$recipes/demo.toml" --max-steps 20 --log-every 1 --train-subset 1280 \
  --test-subset 200 --threads 2 --quiet --metrics "$work/first.jsonl" --checkpoint "$work/first.safetensors"
"$pactrain" train --config "$work/first.jsonl" --quiet --metrics "$work/from-metrics.jsonl"
"$pactrain" train --config "$work/first.safetensors" --quiet --metrics "$work/from-checkpoint.jsonl"
[ "$(losses "$work/first.jsonl" | wc -l)" = 20 ] || fail "the first run logged $(losses "$work/first.jsonl" | wc -l) steps, not 20"
cmp <(losses "$work/first.jsonl") <(losses "$work/from-metrics.jsonl") ||
  fail "the rerun from the metrics file has other losses"
cmp <(losses "$work/first.jsonl") <(losses "$work/from-checkpoint.jsonl") ||
  fail "the rerun from the checkpoint has other losses"
echo "ok: a metrics file and a checkpoint rerun the same 20 losses bit for bit"

# What a recipe may not do.
refused() {  # refused NAME EXPECTED-MESSAGE: the recipe in $work/NAME.toml must fail with it
  if out=$("$pactrain" train --config "$work/$1.toml" --max-steps 1 2>&1); then fail "$1 was accepted"; fi
  [[ "$out" == *"$2"* ]] || fail "$1: expected '$2', got: $out"
  echo "ok: $1 refused"
}
printf 'lrr = 0.1\n' > "$work/unknown-key.toml"
refused unknown-key "unknown key 'lrr'"
printf 'batch = -3\n' > "$work/bad-value.toml"
refused bad-value "--batch: must be > 0, got -3"
printf 'metrics = "m.jsonl"\n' > "$work/output-key.toml"
refused output-key "'metrics' says where a run's output goes"
printf '[compress]\nenc = "ternary"\n' > "$work/unknown-table.toml"
refused unknown-table "unknown table [compress]"
printf 'base = "missing.toml"\n' > "$work/missing-base.toml"
refused missing-base "its base $work/missing.toml does not exist"
printf '{"kind":"step","loss":1}\n' > "$work/no-recipe.jsonl"
if out=$("$pactrain" train --config "$work/no-recipe.jsonl" 2>&1); then fail "no-recipe was accepted"; fi
[[ "$out" == *"holds no recipe record"* ]] || fail "no-recipe: got: $out"

# The command line wins over the recipe, a later --config over an earlier one, key by key in tables.
resolved=$("$pactrain" train --config "$recipes/resnet20-pactrain.toml" --config "$recipes/resnet20-signsgd.toml" \
  --lr 0.05 --compress-opt ef=0 --print-config)
for line in 'lr = 0.05' 'compress = "signsgd"' 'epochs = 15' 'first-bucket-mb = 0.004' 'enc = "ternary"' 'ef = "0"'; do
  grep -qxF "$line" <<<"$resolved" || fail "--print-config lacks '$line'"
done
echo "ok: overrides"

# The batch in its two forms: the command line's wins over the recipe's other form; both in one
# recipe is an error.
resolved=$("$pactrain" train --config "$recipes/resnet20-fashion-mnist.toml" --batch 32 --print-config)
grep -qxF 'batch = 32' <<<"$resolved" || fail "--batch on the command line did not win"
grep -q '^global-batch' <<<"$resolved" && fail "the recipe's global-batch stayed beside --batch"
printf 'batch = 8\nglobal-batch = 16\n' > "$work/both-batches.toml"
refused both-batches "give batch (per rank) or global-batch, not both"
"$pactrain" train --data synthetic --synthetic-size 64 --global-batch 16 --max-steps 2 --quiet \
  --threads 2 --metrics "$work/global.jsonl" || fail "--global-batch on one rank"
echo "ok: --batch and --global-batch"
