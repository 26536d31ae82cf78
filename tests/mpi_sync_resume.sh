#!/usr/bin/env bash
# Resuming runs that synchronise every H steps (--sync local:H, diloco:H and streaming
# diloco:H:fragments=F) on 2 ranks. Between synchronisations each rank's optimizer has its own
# state, DiLoCo's outer optimizer has its momentum (one per fragment when streaming) and the
# compressor of the streamed all-reduces its residuals; all are in the checkpoint, so a run that
# dies after a checkpoint and is resumed must end with a checkpoint byte for byte the same as the
# run trained straight through. Checkpoints (every 5 steps) fall inside the periods: each is a
# synchronisation of its own. A run with another --sync mode must refuse the checkpoint.
# Usage: tests/mpi_sync_resume.sh PACTRAIN MPIEXEC
set -uo pipefail
pactrain="$1" mpiexec="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
failures=0

train() {  # train CHECKPOINT SYNC [options]: 2 epochs of 8 steps, a checkpoint every 5
  local checkpoint="$1" sync="$2"
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n 2 "$pactrain" train \
    --model resnet20 --data synthetic --synthetic-size 256 --image-size 12 --batch 16 \
    --epochs 2 --threads 1 --comm-timeout 10 --seed 3 \
    --sync "$sync" --checkpoint "$checkpoint" --checkpoint-every 5 "$@"
}

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# check NAME SYNC [options]: straight through, then killed at step 12 (after the step-10
# checkpoint) and resumed.
check() {
  local name="$1" sync="$2"
  shift 2
  if ! train "$dir/$name-straight.safetensors" "$sync" "$@" > "$dir/straight.log" 2>&1; then
    fail "$name: the straight run failed"
    tail -20 "$dir/straight.log"
    return
  fi
  PACTRAIN_FAULT=exit:12:1 train "$dir/$name.safetensors" "$sync" "$@" > "$dir/killed.log" 2>&1 &&
    fail "$name: the run with rank 1 dying at step 12 did not fail"
  if ! train "$dir/$name.safetensors" "$sync" "$@" --resume "$dir/$name.safetensors" \
    > "$dir/resumed.log" 2>&1; then
    fail "$name: the resumed run failed"
    tail -20 "$dir/resumed.log"
    return
  fi
  grep -q "resuming at step 10" "$dir/resumed.log" ||
    fail "$name: the resumed run did not start from the step-10 checkpoint"
  if cmp -s "$dir/$name-straight.safetensors" "$dir/$name.safetensors"; then
    echo "$name: resumed from the step-10 checkpoint; final checkpoint identical to the straight run's"
  else
    fail "$name: the resumed run's final checkpoint differs from the straight run's"
  fi
}

# DiLoCo: AdamW inside (each rank's own moments), Nesterov outside, a pruned model whose
# pseudo-gradient pactrain codes ternary with error feedback (each rank's own residuals).
check diloco diloco:3 --optimizer adamw --lr 0.003 --prune magnitude --sparsity 0.5 \
  --prune-schedule oneshot:0 --compress pactrain --compress-opt enc=ternary --compress-opt ef=1
# Streaming DiLoCo: two fragments taking turns every 2 steps, an all-reduce in flight at the
# checkpoint steps' turns; pactrain fp32 on the pruned pseudo-gradient. Its fragments never all
# agree between full synchronisations, so each pruning event is one, taken at its step.
check streaming diloco:4:fragments=2 --prune magnitude --sparsity 0.5 \
  --prune-schedule gradual:1:13:4 --compress pactrain
# (The event before step 1 is at 0%: it synchronises, but prunes nothing.)
pruned_at="$(grep -o '^step [0-9]*: pruned' "$dir/straight.log" | grep -o '[0-9]*' | tr '\n' ' ')"
[ "$pruned_at" = "5 9 13 " ] ||
  fail "streaming: pruning events were taken before steps ${pruned_at:-none}, expected 5 9 13"
# Post-local SGD with Nesterov momentum, after two synchronous steps, pruned by a schedule whose
# events (before steps 1, 5, 9 and 13) wait for the ranks to agree: synchronisations end steps
# 5 (checkpoint), 6, 8 (epoch), 10 (period and checkpoint), 14, 15 (checkpoint) and 16, so the
# events are taken before steps 1 (at 0%: nothing pruned), 5, 10 and 14. Step 9's waits in the
# step-10 checkpoint.
check local local:4 --momentum 0.9 --nesterov --sync-warmup 2 --prune magnitude --sparsity 0.5 \
  --prune-schedule gradual:1:13:4
pruned_at="$(grep -o '^step [0-9]*: pruned' "$dir/straight.log" | grep -o '[0-9]*' | tr '\n' ' ')"
[ "$pruned_at" = "5 10 14 " ] ||
  fail "local: pruning events were taken before steps ${pruned_at:-none}, expected 5 10 14"
# The same with taylor, which sums what each rank's local steps observed: the sums are kept per
# rank, so the resumed run scores the step-14 event as the straight one does.
check local-taylor local:4 --sync-warmup 2 --prune taylor --sparsity 0.5 \
  --prune-schedule gradual:1:13:4

# Another --sync mode is refused, by name.
if train "$dir/other.safetensors" step --resume "$dir/local-straight.safetensors" \
  --momentum 0.9 --nesterov --prune magnitude --sparsity 0.5 --prune-schedule gradual:1:13:4 > "$dir/other.log" 2>&1; then
  fail "a local:4 checkpoint was resumed with --sync step"
elif ! grep -q "trained with --sync local:4, this run uses --sync step" "$dir/other.log"; then
  fail "resuming a local:4 checkpoint with --sync step failed without naming the modes"
  tail -5 "$dir/other.log"
fi

[ "$failures" -eq 0 ] && echo "all sync resume checks passed"
exit "$failures"
