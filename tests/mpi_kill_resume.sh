#!/usr/bin/env bash
# Kill and resume on 2 ranks. A 32-step pruned, pactrain-ternary run with error feedback (per-rank
# residuals, taylor sums, masks changing every other step) is trained straight through once; then
#   1. rank 0 is killed with SIGKILL halfway through writing a checkpoint
#      (PACTRAIN_FAULT=kill-in-checkpoint, see apps/faults.h), and
#   2. the whole job is killed with kill -9 at an arbitrary moment, three times,
# and each time the run is resumed from what is on disk with --resume. The last checkpoint must
# load (no half-written file ever replaces it), and every resumed run must end with a checkpoint
# byte for byte the same as the uninterrupted run's, and its first save removes the temporary
# file the killed writer left.
# Usage: tests/mpi_kill_resume.sh PACTRAIN MPIEXEC
set -uo pipefail
pactrain="$1" mpiexec="$2"
dir="$(mktemp -d)"
trap 'pkill -9 -f "$dir" 2>/dev/null; rm -rf "$dir"' EXIT
failures=0

train() {  # train CHECKPOINT [options]: the run under test, in the foreground
  local checkpoint="$1"
  shift
  timeout 300 "$mpiexec" --oversubscribe -n 2 "$pactrain" train \
    --model resnet20 --data synthetic --synthetic-size 256 --image-size 12 --batch 16 \
    --epochs 4 --threads 1 --comm-timeout 10 --log-every 1 --seed 3 \
    --prune taylor --sparsity 0.8 --prune-schedule gradual:2:12:2 \
    --compress pactrain --compress-opt enc=ternary --compress-opt ef=1 \
    --checkpoint "$checkpoint" "$@"
}

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

train "$dir/straight.safetensors" > "$dir/straight.log" 2>&1 || {
  cat "$dir/straight.log"
  exit 1
}

# resume_and_compare NAME CHECKPOINT: resumes from CHECKPOINT and compares the final files.
resume_and_compare() {
  local name="$1" checkpoint="$2"
  if ! train "$checkpoint" --resume "$checkpoint" > "$dir/resume.log" 2>&1; then
    fail "$name: the resumed run failed"
    tail -20 "$dir/resume.log"
    return
  fi
  local at
  at=$(grep -o "resuming at step [0-9]*" "$dir/resume.log" | grep -o "[0-9]*$")
  if cmp -s "$dir/straight.safetensors" "$checkpoint"; then
    echo "$name: resumed at step $at; final checkpoint identical to the uninterrupted run's"
  else
    fail "$name: resumed at step $at, but the final checkpoint differs from the uninterrupted run's"
  fi
}

# 1. Killed while writing: the file on disk is still the previous step's, complete.
checkpoint="$dir/in-write.safetensors"
PACTRAIN_FAULT=kill-in-checkpoint:10:0 train "$checkpoint" --checkpoint-every 1 \
  > "$dir/fault.log" 2>&1
status=$?
partial=$(ls "$checkpoint".tmp.* 2>/dev/null | wc -l)
if [ "$status" -eq 0 ]; then fail "kill-in-checkpoint: the run was not killed"; fi
if [ "$partial" -ne 1 ]; then fail "kill-in-checkpoint: expected 1 half-written file, found $partial"; fi
echo "killed while writing the step-10 checkpoint: exit status $status, $partial half-written temporary file left beside it"
resume_and_compare "killed while writing" "$checkpoint"
left=$(ls "$checkpoint".tmp.* 2>/dev/null | wc -l)
if [ "$left" -ne 0 ]; then fail "the resumed run's saves left the dead writer's temporary file"; fi

# 2. kill -9 of every rank at an arbitrary moment: once rank 0's metrics show step K, whatever the
#    job is doing then (a step, a collective, a checkpoint write).
for k in 5 11 14; do
  checkpoint="$dir/kill-$k.safetensors"
  metrics="$dir/kill-$k.jsonl"
  train "$checkpoint" --checkpoint-every 1 --metrics "$metrics" > "$dir/run.log" 2>&1 &
  job=$!
  for _ in $(seq 3000); do
    grep -q "\"step\":$k," "$metrics" 2>/dev/null && break
    sleep 0.01
  done
  pkill -9 -f -- "--checkpoint $checkpoint" 2>/dev/null
  wait "$job" 2>/dev/null
  if [ ! -f "$checkpoint" ]; then
    fail "kill -9 at step $k: no checkpoint was written before the kill"
    continue
  fi
  if grep -q "^epoch 4:" "$dir/run.log"; then
    fail "kill -9 at step $k: the run finished before the kill"
    continue
  fi
  resume_and_compare "kill -9 at step $k" "$checkpoint"
done
exit $((failures > 0))
