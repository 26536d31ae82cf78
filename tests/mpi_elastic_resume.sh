#!/usr/bin/env bash
# Elastic resume: checkpoints written by P ranks resumed on P' ranks with the same global batch.
#   1. 2 -> 4 -> 2 ranks (pactrain ternary with error feedback on a pruned model, PowerSGD,
#      DiLoCo; dense in part 2) and 1 -> 2 -> 1 (dense): a 24-step ResNet-20 run dies after its
#      step-8 checkpoint, resumes on the other number of ranks, dies after step 16, and
#      finishes on the first number. Every
#      step's global batch must be the same sample indices as an uninterrupted run's (each rank
#      writes what it loads, PACTRAIN_TRACE_SAMPLES), and the run must say how it mapped each
#      rank's state.
#   2. A model whose forward does not depend on the per-rank batch (the ViT: layer norm, no
#      batch norm), dense and pactrain fp32, 2 -> 4 -> 2: the final weights may differ from the
#      uninterrupted run's only by the rounding of summing the gradients in another order. The
#      bound: less than 1% of what the run's last step moved them, which any change of data or
#      state (a skipped, repeated or reordered batch) exceeds many times over.
#   3. kill -9 of one rank of four, then the survivors (3 ranks) resume from the last checkpoint.
#   4. A changed global batch is refused, and taken with --allow-batch-change, which says what
#      it changes.
# Usage: tests/mpi_elastic_resume.sh PACTRAIN MPIEXEC
set -uo pipefail
pactrain="$1" mpiexec="$2"
dir="$(mktemp -d)"
trap 'pkill -9 -f "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# run RANKS TRACE CHECKPOINT [options]: 2 epochs of 12 steps, global batch 24 (or $GLOBAL), a
# checkpoint every 8 steps; RANKS may be 1, 2, 3 or 4.
run() {
  local ranks="$1" trace="$2" checkpoint="$3"
  shift 3
  PACTRAIN_TRACE_SAMPLES="$trace" timeout 300 "$mpiexec" --oversubscribe -n "$ranks" \
    "$pactrain" train --data synthetic --synthetic-size 288 --image-size 12 --global-batch "${GLOBAL:-24}" \
    --epochs 2 --threads 1 --comm-timeout 20 --seed 3 --log-every 1 \
    --checkpoint "$checkpoint" --checkpoint-every 8 "$@"
}

# same_samples TRACE FIRST LAST [TRACE FIRST LAST ...] -- STRAIGHT: the steps FIRST..LAST of each
# segment's trace, together, must be the straight run's steps, sample for sample.
same_samples() {
  /usr/bin/python3 - "$@" <<'EOF'
import collections, glob, sys
args = sys.argv[1:]
cut = args.index("--")
def read(prefix, first, last):
    steps = collections.defaultdict(list)
    for path in glob.glob(prefix + ".rank*"):
        for line in open(path):
            step, samples = line.split(":", 1)
            if first <= int(step) <= last:
                steps[int(step)] += [int(s) for s in samples.split()]
    return {s: sorted(v) for s, v in steps.items()}
resumed = {}
for i in range(0, cut, 3):
    resumed.update(read(args[i], int(args[i + 1]), int(args[i + 2])))
straight = read(args[cut + 1], 0, 1 << 30)
if len(straight) != 24 or any(len(v) != 24 for v in straight.values()):
    sys.exit("the straight run's trace is not 24 steps of 24 samples")
bad = [s for s in straight if resumed.get(s) != straight[s]]
if bad:
    sys.exit(f"steps {bad} trained on other samples than the straight run's")
EOF
}

# Every step's samples of the uninterrupted run: they depend on the seed and the global batch
# alone, so one run on 2 ranks serves every case.
if ! run 2 "$dir/straight" "$dir/straight.safetensors" --model resnet20 > "$dir/straight.log" 2>&1; then
  tail -20 "$dir/straight.log"
  exit 1
fi

# chain NAME RANKS_A RANKS_B [options]: A ranks to step 8, B ranks to step 16, A ranks to the end.
chain() {
  local name="$1" a="$2" b="$3"
  shift 3
  local checkpoint="$dir/$name.safetensors"
  PACTRAIN_FAULT=exit:9:0 run "$a" "$dir/$name-1" "$checkpoint" "$@" > "$dir/$name-1.log" 2>&1 &&
    fail "$name: the first part did not die at step 9"
  if ! PACTRAIN_FAULT=exit:17:0 run "$b" "$dir/$name-2" "$checkpoint" "$@" --resume "$checkpoint" \
    > "$dir/$name-2.log" 2>&1; then :; else fail "$name: the second part did not die at step 17"; fi
  if ! run "$a" "$dir/$name-3" "$checkpoint" "$@" --resume "$checkpoint" > "$dir/$name-3.log" 2>&1; then
    fail "$name: the last part failed"
    tail -20 "$dir/$name-3.log"
    return 1
  fi
  grep -q "resuming a checkpoint of $a ranks on $b: the same global batch of 24" "$dir/$name-2.log" ||
    fail "$name: the $b-rank part did not say it resumed $a ranks' checkpoint"
  grep -q "resuming at step 16" "$dir/$name-3.log" ||
    fail "$name: the last part did not resume at step 16"
  if same_samples "$dir/$name-1" 0 7 "$dir/$name-2" 8 15 "$dir/$name-3" 16 23 -- "$dir/straight"; then
    echo "$name: $a -> $b -> $a ranks; every step's global batch is the straight run's samples"
  else
    fail "$name: the resumed steps' samples differ from the straight run's"
  fi
}

# expect NAME PART TEXT: that part's log says TEXT (how the ranks' state was mapped).
expect() {
  grep -qF -- "$3" "$dir/$1-$2.log" || {
    fail "$1: part $2 does not say '$3'"
    grep -A6 "resuming a checkpoint" "$dir/$1-$2.log"
  }
}

# Buckets of a few kB on the wire: a ternary code's width depends on the ranks, so 4 ranks would
# cut them otherwise, and keep the saved run's instead.
chain pactrain-ef 2 4 --model resnet20 --prune magnitude --sparsity 0.8 --prune-schedule oneshot:0 \
  --compress pactrain --compress-opt enc=ternary --compress-opt ef=1 \
  --first-bucket-mb 0.004 --bucket-mb 0.008
expect pactrain-ef 2 "kept until a mask changes (this run's wire bytes group the parameters otherwise)"
expect pactrain-ef 2 "compressor pactrain: residual averaged over the 2 saved ranks; encoding, scale, steps as saved"
expect pactrain-ef 3 "compressor pactrain: residual averaged over the 4 saved ranks"
expect pactrain-ef 2 "random generator: as saved (every rank's was the same)"
chain powersgd 2 4 --model resnet20 --compress powersgd --compress-opt rank=2 \
  --compress-opt start_iter=2
expect powersgd 2 "compressor powersgd: error averaged over the 2 saved ranks; q, steps as saved"
chain one-to-two 1 2 --model resnet20
# DiLoCo: checkpoints at synchronisations; each rank's inner AdamW moments are averaged, the outer
# Nesterov momentum is every rank's.
chain diloco 2 4 --model resnet20 --sync diloco:4 --optimizer adamw --lr 0.003
expect diloco 2 "--sync diloco:4 state: "
expect diloco 2 "averaged over the 2 saved ranks"

# 2. Layer norm: the resumed weights against the straight run's, within rounding.
for name in vit-dense vit-pactrain; do
  options=(--model vit-tiny --patch 4 --depth 3 --schedule constant --lr 0.01)
  [ "$name" = vit-pactrain ] && options+=(--prune magnitude --sparsity 0.5 --prune-schedule oneshot:0
    --compress pactrain --compress-opt enc=fp32)
  run 2 "$dir/$name-straight" "$dir/$name-straight.safetensors" "${options[@]}" \
    > "$dir/$name-straight.log" 2>&1 || fail "$name: the straight run failed"
  run 2 "$dir/$name-23" "$dir/$name-23.safetensors" "${options[@]}" --max-steps 23 \
    > "$dir/$name-23.log" 2>&1 || fail "$name: the 23-step run failed"
  chain "$name" 2 4 "${options[@]}" || continue
  if report=$(/usr/bin/python3 "$(dirname "$0")/checkpoint_diff.py" "$dir/$name.safetensors" \
    "$dir/$name-straight.safetensors" "$dir/$name-23.safetensors" 0.01); then
    echo "$name: $report"
  else
    fail "$name: $report"
  fi
done

# 3. kill -9 of rank 3 of 4 once it loaded step 13 (after the step-8 checkpoint; steps are quick, so
#    it may be a later one); the 3 survivors resume from the last checkpoint.
checkpoint="$dir/survivors.safetensors"
run 4 "$dir/survivors-1" "$checkpoint" --model resnet20 --compress pactrain \
  --prune magnitude --sparsity 0.8 --compress-opt enc=ternary --compress-opt ef=1 \
  > "$dir/survivors-1.log" 2>&1 &
job=$!
for _ in $(seq 3000); do
  [ -f "$dir/survivors-1.rank3" ] && grep -q "^13:" "$dir/survivors-1.rank3" && break
  sleep 0.01
done
# Rank 3 alone: the process whose environment says so (mpirun then ends the others).
for pid in $(pgrep -f -- "--checkpoint $checkpoint"); do
  tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=3 &&
    kill -9 "$pid"
done
wait "$job" 2>/dev/null
if run 3 "$dir/survivors-2" "$checkpoint" --model resnet20 --compress pactrain \
  --prune magnitude --sparsity 0.8 --compress-opt enc=ternary --compress-opt ef=1 \
  --resume "$checkpoint" > "$dir/survivors-2.log" 2>&1; then
  at=$(grep -o "resuming at step [0-9]*" "$dir/survivors-2.log" | grep -o "[0-9]*$")
  if same_samples "$dir/survivors-1" 0 $((at - 1)) "$dir/survivors-2" "$at" 23 -- "$dir/straight"; then
    echo "kill -9 of rank 3 of 4 from step 13 on: the 3 survivors resumed at step $at, same samples"
  else
    fail "the survivors' steps trained on other samples than the straight run's"
  fi
else
  fail "the survivors could not resume"
  tail -20 "$dir/survivors-2.log"
fi

# 4. Another global batch: refused, then taken with --allow-batch-change.
if GLOBAL=48 run 2 "$dir/batch" "$dir/batch.safetensors" --model resnet20 \
  --resume "$dir/straight.safetensors" > "$dir/batch.log" 2>&1; then
  fail "a checkpoint of global batch 24 resumed with 48 without --allow-batch-change"
fi
grep -q "Give --global-batch 24 to keep it, or --allow-batch-change" "$dir/batch.log" ||
  fail "the refusal of another global batch does not say what to do"
PACTRAIN_FAULT=exit:9:0 run 2 "$dir/changed-1" "$dir/changed.safetensors" --model resnet20 \
  > /dev/null 2>&1
if GLOBAL=48 run 2 "$dir/changed-2" "$dir/changed.safetensors" --model resnet20 \
  --allow-batch-change --resume "$dir/changed.safetensors" > "$dir/changed.log" 2>&1; then
  grep -q "the global batch goes from 24 to 48 samples, an epoch is now 6 steps; epoch 0 resumes at its batch 4 (sample 192 of the epoch's order), step 4 instead of 8" \
    "$dir/changed.log" || fail "--allow-batch-change does not say what it changed"
else
  fail "--allow-batch-change did not resume"
  tail -5 "$dir/changed.log"
fi

[ "$failures" -eq 0 ] && echo "all elastic resumes passed" || exit 1
