#!/usr/bin/env bash
# Fault injection on 2 ranks (PACTRAIN_FAULT, see apps/faults.h): a rank that hangs, a rank that
# dies, and a NaN in one rank's loss. The job must end, non-zero, with a message that says what
# happened, within a bounded time; with --skip-nonfinite the NaN step is skipped and the run
# finishes. Prints how long the surviving rank needed to exit after a peer hung or died.
# Usage: tests/mpi_faults.sh PACTRAIN MPIEXEC
set -uo pipefail
pactrain="$1" mpiexec="$2"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failures=0

# run NAME FAULT EXPECTED_STATUS(zero|nonzero) PATTERNS [extra train options]
# PATTERNS: extended regular expressions, one per line, each of which some output line must match
# (or, after a leading '!', none may).
# With `limit=S run ...` the job must also have ended within S seconds (times
# $MPI_FAULTS_TIME_FACTOR, default 1: scripts/sanitize_threads.sh runs an instrumented build about
# ten times slower); `timeout=T run ...` sets --comm-timeout (5 s by default).
run() {
  local name="$1" fault="$2" expected="$3" pattern="$4"
  shift 4
  local start status elapsed
  start=$(date +%s%N)
  PACTRAIN_FAULT="$fault" timeout 120 "$mpiexec" --oversubscribe -n 2 "$pactrain" train \
    --model resnet20 --data synthetic --synthetic-size 512 --image-size 12 --batch 16 \
    --max-steps 8 --threads 1 --comm-timeout "${timeout:-5}" "$@" > "$log" 2>&1
  status=$?
  elapsed=$(( ($(date +%s%N) - start) / 100000000 ))  # tenths of a second
  local ok=1
  if [ "$status" -eq 124 ]; then ok=0; echo "$name: still running after 120 s"; fi
  if [ "$expected" = zero ] && [ "$status" -ne 0 ]; then ok=0; fi
  if [ "$expected" = nonzero ] && [ "$status" -eq 0 ]; then ok=0; fi
  while IFS= read -r p; do
    if [ "${p:0:1}" = '!' ]; then
      if grep -qE -- "${p:1}" "$log"; then ok=0; fi
    elif ! grep -qE -- "$p" "$log"; then
      ok=0
    fi
  done <<<"$pattern"
  local allowed=$(( ${limit:-0} * ${MPI_FAULTS_TIME_FACTOR:-1} ))
  if [ -n "${limit:-}" ] && [ "$elapsed" -gt $((allowed * 10)) ]; then
    ok=0
    echo "$name: took longer than $allowed s"
  fi
  if [ "$ok" -eq 1 ]; then
    printf '%-28s ok: exit status %d after %d.%d s\n' "$name" "$status" $((elapsed / 10)) $((elapsed % 10))
  else
    printf '%-28s FAILED: exit status %d after %d.%d s, expected %s and /%s/; output:\n' \
      "$name" "$status" $((elapsed / 10)) $((elapsed % 10)) "$expected" "$pattern"
    sed 's/^/    /' "$log" | tail -20
    failures=$((failures + 1))
  fi
}

limit=30 run "a rank hangs" hang:3:1 nonzero "rank 0 waited 5 s for (all_reduce|broadcast)"
# The dead rank says nothing; mpirun names it and its exit status, and stops the survivor at once:
# before the survivor's 5 s communication timeout would have.
limit=20 run "a rank dies" exit:3:1 nonzero "!waited 5 s for
exited with non-zero status, thus causing
Process name: \[\[[0-9]+,[0-9]+\],1\]
Exit code: +9"
run "NaN in one rank's loss" nan-loss:3:1 nonzero "step 4: the gradient of '[a-z0-9.]+' is not finite on rank [01]"
# A rank that fails alone (its own NaN in a local step) names the fault and the job ends at once,
# with the default communication timeout and with none (it used to wait in MPI_Finalize for the
# other rank, which waited for it: mpirun killed it at the timeout before it printed anything).
for timeout in 20 0; do
  timeout=$timeout limit=15 run "NaN alone, local SGD, timeout $timeout" nan-loss:3:1 nonzero \
    "rank 1: step 4: the loss is nan on rank 1; the run stops" --sync local:8
done
run "collectives out of step" extra-collective:3:1 nonzero \
  "the ranks' collectives do not match: this rank runs all_reduce #[0-9]+ \([0-9]+ f32 values\) and expects [0-9]+ bytes from rank [01], which sent [0-9]+ bytes"
# Rank 0 takes 3 s to write a checkpoint, longer than the 2 s timeout: the other rank, waiting
# for it, allows the time a slow disk would take for the checkpoint's bytes, and the run finishes.
checkpoint="$(mktemp -d)"
timeout=2 run "a slow checkpoint write" slow-checkpoint:4:0 zero "!waited" \
  --checkpoint "$checkpoint/run.safetensors" --checkpoint-every 4
rm -rf "$checkpoint"
run "NaN, --skip-nonfinite" nan-loss:3:1 zero "step 4: the gradient of (rank 1|'[a-z0-9.]+') is not finite.*; step skipped" \
  --skip-nonfinite
# A quantised wire cannot carry a NaN: the ranks learn of it from the reducer's verdict instead.
ternary=(--prune magnitude --sparsity 0.8 --compress pactrain --compress-opt enc=ternary
  --compress-opt ef=1)
run "NaN, pactrain ternary ef=1" nan-loss:3:1 nonzero "step 4: the gradient of '[a-z0-9.]+' is not finite on rank 1
step 4: the gradient of rank 1 is not finite; the run stops" "${ternary[@]}"
run "NaN, ternary, skipped" nan-loss:3:1 zero "step 4: the gradient of rank 1 is not finite; step skipped" \
  --skip-nonfinite "${ternary[@]}"
exit $((failures > 0))
