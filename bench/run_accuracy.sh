#!/usr/bin/env bash
# Accuracy of pruned training with the PacTrain compressor: ResNet-20 on Fashion-MNIST, 2 ranks
# (batch 64 each, 128 in all), the 15-epoch recipe of docs/results.md, global magnitude pruning
# (the first convolution excluded) ramped by Zhu & Gupta's cubic schedule over epochs 2-8.
# Each run writes out/accuracy/NAME.{log,jsonl}; the table is built from whatever runs exist.
# Usage: bench/run_accuracy.sh [RUN ...]
#   RUN: dense, p50, p80, p90 (pactrain fp32), t50, t80, t90 (pactrain's default ternary, codes
#        in -3..3 since 2026-12-04; with -levelsL: --compress-opt levels=L, codes in -L..L, so
#        t80-levels1 is TernGrad's code; with -noef: no error feedback; with -bf16oned: the 1-D
#        parameters in bf16), and the
#        unpruned baselines: fp16, topk (DGC: 0.1%, momentum correction, the paper's per-epoch
#        warm-up), randomk (1%), terngrad, powersgd2, powersgd4 (rank 2, 4), signsgd (EF-signSGD),
#        and PyTorch DDP on the same recipe (bench/peers/torch_train.py): torch-allreduce,
#        torch-fp16, torch-powersgd2, torch-powersgd4 (its communication hooks);
#        communicating every H steps (docs/local-sgd.md): localH, dilocoH (dense), p80-dilocoH,
#        t80-dilocoH (pactrain at 80%), torch-localH, torch-dilocoH (PyTorch's), e.g. t80-diloco32,
#        with -outerLRmM DiLoCo's outer learning rate LR and momentum M (diloco32-outer1m0.5);
#        a pruned run with -rampE ends its pruning ramp with epoch E instead of 8 (t80-ramp4),
#        with -rampS-E it also starts it after epoch S instead of 1 (t80-ramp0-3: from the first
#        step to the end of epoch 3); with -initCRIT it prunes once at the first step by
#        criterion CRIT instead (t80-initsnip);
#        a -ranksN suffix trains on N ranks with the same global batch of 128 (128 / N each), so
#        the same steps, schedule and pruning ramp (t80-levels3-ranks4); then
#        a last -seedN suffix runs the same recipe with seed N (default 1), e.g. t80-levels3-seed2
# With no RUN it runs the seven pactrain and dense runs (about 25 minutes each on a quiet 2-core
# machine); with --table it only prints the table of the runs already done.
# End to end on a shaped link: inside `scripts/testbed --mode hosts --rate R --`, each rank trains
# on its own host and link, and the run is saved as NAME-at-R (t80 -> t80-at-10mbit), beside the
# unshaped one. The PyTorch runs start their ranks on one host, so they are refused there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="$root/out/accuracy"
mkdir -p "$out"
runs=("$@")
[ ${#runs[@]} -eq 0 ] && runs=(dense p80 t80 p90 t90 p50 t50)
[ "${runs[0]}" = --table ] && runs=()

# A given BUILD_DIR is used as it is (a copy of the binary, say, while the tree changes).
[ ${#runs[@]} -gt 0 ] && [ -z "${BUILD_DIR:-}" ] && "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# The recipes are files (apps/recipes): the 15-epoch ResNet-20 recipe, with fp32 buckets of
# 0.4 MB first and 0.5 MB after (ResNet-20's gradient is 1.09 MB: DDP's default 1 MB first bucket
# would hold 96% of it); and the coded methods' recipes on top of it (pactrain ternary,
# EF-signSGD, DGC), whose buckets are 4 kB first and 8 kB after on the wire, which took their
# 2-rank steps at 10 Mbit/s from 0.115 to 0.069 s (pactrain) and 0.106 to 0.076 s (EF-signSGD)
# (docs/results.md, "2, 4 and 8 ranks"). fp32 and dense runs compute the same with any layout; a
# ternary run draws its coin flips per bucket, and top-k keeps its 0.1% per bucket (runs before
# 2026-12-04 evening: the default layout; bucket sizes are bytes on the wire since 2026-12-06,
# dense bytes before).
recipes="$root/apps/recipes"
fp32_buckets=(--first-bucket-mb 0.4 --bucket-mb 0.5)
global_batch=128
steps_per_epoch=$((60000 / global_batch))  # 468: Fashion-MNIST has 60,000 training images
launch=(mpirun) at=""
if [ -n "${TESTBED_HOSTFILE:-}" ]; then
  [ "${TESTBED_MODE:-}" = hosts ] || { echo "run_accuracy.sh: on the testbed, use --mode hosts" >&2; exit 2; }
  # Each host has one slot, so mpirun would bind every rank to the same core 0.
  launch=(mpirun --hostfile "$TESTBED_HOSTFILE" --mca plm_rsh_agent "$TESTBED_RSH" --bind-to none)
  at="-at-${TESTBED_RATE}"
fi

for run in "${runs[@]+"${runs[@]}"}"; do
  # A -seedN suffix only changes the seed; the rest of the name says what runs.
  seed=1 name="$run"
  if [[ "$run" =~ ^(.+)-seed([0-9]+)$ ]]; then
    run="${BASH_REMATCH[1]}" seed="${BASH_REMATCH[2]}"
  fi
  # A -ranksN suffix splits the same global batch over N ranks.
  ranks=2
  if [[ "$run" =~ ^(.+)-ranks([0-9]+)$ ]]; then
    run="${BASH_REMATCH[1]}" ranks="${BASH_REMATCH[2]}"
    [ "$ranks" -ge 1 ] && [ $((global_batch % ranks)) -eq 0 ] ||
      { echo "run_accuracy.sh: $name: -ranksN needs N from 1 up dividing the global batch of" \
          "$global_batch" >&2; exit 2; }
  fi
  if [ -n "$at" ] && [ "$ranks" != "${TESTBED_RANKS:-}" ]; then
    echo "run_accuracy.sh: $name trains on $ranks ranks; the testbed has ${TESTBED_RANKS:-?}" \
      "hosts (scripts/testbed --ranks $ranks)" >&2; exit 2
  fi
  batch=$((global_batch / ranks))
  # More ranks than cores share them (unbound); two ranks stay bound one to a core, as before.
  over=(); [ -z "$at" ] && [ "$ranks" -gt 2 ] && over=(--oversubscribe)
  name="$name$at"
  # A -outerLRmM suffix after -dilocoH sets DiLoCo's outer learning rate and momentum (0.7 and
  # 0.9 by default): diloco32-outer1m0.5.
  outer=()
  if [[ "$run" =~ ^(.*diloco[0-9]+)-outer([0-9.]+)m([0-9.]+)$ ]]; then
    run="${BASH_REMATCH[1]}" outer=(--outer-lr "${BASH_REMATCH[2]}" --outer-momentum "${BASH_REMATCH[3]}")
  fi
  # A -localH or -dilocoH suffix (or the whole name) synchronises every H steps.
  sync=step base="$run"
  if [[ "$run" =~ ^(.*-)?(local|diloco)([0-9]+)$ ]]; then
    sync="${BASH_REMATCH[2]}:${BASH_REMATCH[3]}"
    base="${BASH_REMATCH[1]%-}"
    [ -n "$base" ] || base=dense
  fi
  # A -rampE suffix ends the pruning ramp with epoch E (8 by default); -rampS-E also starts it
  # after epoch S (1 by default; 0 is the first step).
  ramp_start=1 ramp_end=8
  if [[ "$base" =~ ^([pt][0-9][0-9].*)-ramp(([0-9]+)-)?([0-9]+)$ ]]; then
    base="${BASH_REMATCH[1]}" ramp_start="${BASH_REMATCH[3]:-1}" ramp_end="${BASH_REMATCH[4]}"
    [ "$ramp_end" -gt "$ramp_start" ] || { echo "run_accuracy.sh: $run: the ramp starts after" \
      "epoch $ramp_start, so it must end with epoch $((ramp_start + 1)) or later" >&2; exit 2; }
  fi
  # A -initCRIT suffix prunes once, at the first step, by criterion CRIT (t80-initsnip: SNIP's
  # |g * w| on the first batch), as PacTrain's prototype prunes at epoch 0: no ramp.
  prune=()
  if [[ "$base" =~ ^([pt][0-9][0-9].*)-init(magnitude|snip|grasp|synflow)$ ]]; then
    base="${BASH_REMATCH[1]}" prune=(--prune "${BASH_REMATCH[2]}")
  fi
  # Ternary variants: t80-levels3, t80-noef, t80-levels3-noef, t80-bf16oned (the 1-D
  # parameters in bf16: --compress-opt enc1d=bf16).
  codec=()
  if [[ "$base" =~ ^(t[0-9][0-9])((-levels[0-9]+)?)((-noef)?)((-bf16oned)?)$ ]]; then
    base="${BASH_REMATCH[1]}"
    [ -n "${BASH_REMATCH[2]}" ] && codec+=(--compress-opt "levels=${BASH_REMATCH[2]#-levels}")
    [ -n "${BASH_REMATCH[4]}" ] && codec+=(--compress-opt ef=0)
    [ -n "${BASH_REMATCH[6]}" ] && codec+=(--compress-opt enc1d=bf16)
  fi
  case "$base" in
    torch | torch-allreduce | torch-fp16 | torch-powersgd[24])
      [ -z "$at" ] || { echo "run_accuracy.sh: $run starts its ranks on one host; not on the testbed" >&2; exit 2; }
      "$root/scripts/setup.sh" python3-torch python3-torchvision >/dev/null
      hook="${base#torch}" hook="${hook#-}"
      /usr/bin/python3 "$root/bench/peers/torch_train.py" --metrics "$out/$name.jsonl" \
        --hook "${hook:-allreduce}" --sync "$sync" --ranks "$ranks" --epochs 15 --batch "$batch" \
        --lr 0.1 --seed "$seed" "${outer[@]+"${outer[@]}"}" > "$out/$name.log" 2>&1
      continue ;;
    dense | fp16 | terngrad) extra=(--config "$recipes/resnet20-fashion-mnist.toml" --compress "$base") ;;
    signsgd) extra=(--config "$recipes/resnet20-signsgd.toml") ;;
    # DGC's momentum correction moves the gradient; the optimizer's momentum then moves only
    # the weight decay, as DGC's own optimizer (runs before 2026-12-04 trained with --momentum 0,
    # so the weight decay had no momentum: topk-decay-unmoved). Its warm-up counts epochs of 468
    # steps: the global batch is 128 on any number of ranks.
    topk) extra=(--config "$recipes/resnet20-dgc.toml") ;;
    randomk) extra=(--config "$recipes/resnet20-fashion-mnist.toml" --compress randomk --compress-opt ratio=0.01) ;;
    powersgd[0-9]) extra=(--config "$recipes/resnet20-fashion-mnist.toml" --compress powersgd
                          --compress-opt "rank=${base#powersgd}") ;;
    [pt][0-9][0-9])
      # resnet20-pactrain.toml is t80; fp32 values (p*) take the fp32 buckets.
      schedule="gradual:$((ramp_start * steps_per_epoch)):$((ramp_end * steps_per_epoch)):117"
      [ ${#prune[@]} -eq 0 ] || schedule=oneshot:0
      extra=(--config "$recipes/resnet20-pactrain.toml" "${codec[@]+"${codec[@]}"}"
             --sparsity "0.${base:1:2}"
             --prune-schedule "$schedule" "${prune[@]+"${prune[@]}"}")
      if [ "${base:0:1}" = p ]; then extra+=(--compress-opt enc=fp32 "${fp32_buckets[@]}"); fi ;;
    *) echo "unknown run '$run'; expected dense, p50, p80, p90, t50, t80, t90 (with -levelsL," \
            "-noef, -rampE, -rampS-E or -initCRIT), fp16, topk," \
            "randomk, terngrad, powersgd2, powersgd4, signsgd or torch-{allreduce,fp16,powersgd2," \
            "powersgd4}, optionally with -localH or -dilocoH (then -outerLRmM), then -ranksN, then -seedN" >&2; exit 2 ;;
  esac
  "${launch[@]}" "${over[@]+"${over[@]}"}" -np "$ranks" "$build/pactrain" train "${extra[@]}" \
    --batch "$batch" --seed "$seed" \
    --sync "$sync" "${outer[@]+"${outer[@]}"}" --metrics "$out/$name.jsonl" > "$out/$name.log" 2>&1
done

echo "| run | encoding | sparsity | test accuracy (final) | best epoch | bytes/step per rank (last epoch) |"
echo "|---|---|---:|---:|---:|---:|"
known=(dense fp16 topk randomk terngrad powersgd2 powersgd4 signsgd p50 p80 p90 t50 t80 t90
       torch-allreduce torch-fp16 torch-powersgd2 torch-powersgd4)
# The known runs in this order, then any other run in the folder (variants, -localH, -dilocoH).
others=()
for f in "$out"/*.jsonl; do
  [ -f "$f" ] || continue
  name="$(basename "$f" .jsonl)"
  [[ " ${known[*]} " == *" $name "* ]] || others+=("$name")
done
for run in "${known[@]}" "${others[@]+"${others[@]}"}"; do
  [ -f "$out/$run.jsonl" ] || continue
  /usr/bin/python3 - "$out/$run.jsonl" "$run" "$root/bench" <<'PY'
import json, sys
path, run = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from report_tta import epoch_bytes_per_step
records = [json.loads(l) for l in open(path)]
epochs = [r for r in records if r["kind"] == "epoch"]
if not epochs:
    sys.exit(0)
per_step = epoch_bytes_per_step(records, epochs[-1])
best = max(epochs, key=lambda r: r["test_acc"])
base = run.split("-")[0]
pruned = base[0] in "pt" and base[1:].isdigit()
enc = ("fp32" if base[0] == "p" else "ternary") if pruned else base
sparsity = base[1:] + "%" if pruned else "0%"
print(f"| {run} | {enc} | {sparsity} | {100 * epochs[-1]['test_acc']:.2f}% ({len(epochs)} epochs) "
      f"| {100 * best['test_acc']:.2f}% (epoch {best['epoch'] + 1}) | {per_step:,.0f} |")
PY
done
