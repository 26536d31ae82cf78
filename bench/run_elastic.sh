#!/usr/bin/env bash
# A recipe run whose number of ranks changes twice, as a job that loses nodes and gets them back:
# A ranks train epochs 1-5, B ranks resume the epoch-5 checkpoint and train epochs 6-10, A ranks
# resume the epoch-10 checkpoint and finish. The recipe's global batch keeps the steps the same
# (docs/reliability.md, "Resuming on another number of ranks"). Each part ends on its own one step
# after its checkpoint, by the fault injector's `exit` (apps/faults.h), as a lost node would end it.
# Writes out/accuracy/NAME.{log,jsonl} (the metrics of all three parts, each resume recorded).
# Usage: bench/run_elastic.sh RECIPE NAME [A B]   (A = 2, B = 4 by default)
#   e.g. bench/run_elastic.sh apps/recipes/resnet20-pactrain.toml t80-elastic-2-4-2
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
[ $# -ge 2 ] || { sed -n 2,10p "$0" >&2; exit 2; }
recipe="$1" name="$2" a="${3:-2}" b="${4:-4}"
out="$root/out/accuracy"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

# The recipe's steps per epoch, from its own plan line ("..., 468 steps per epoch").
steps=$("$build/pactrain" train --config "$recipe" --max-steps 2 --schedule constant 2>&1 |
  grep -o "[0-9]* steps per epoch" | grep -o "^[0-9]*")
every=$((5 * steps))
checkpoint="$out/$name.safetensors" log="$out/$name.log" metrics="$out/$name.jsonl"
rm -f "$checkpoint" "$metrics"
: > "$log"

part() {  # part RANKS STOP [options]: STOP: the step at which the part ends itself (0: none)
  local ranks="$1" stop="$2"
  shift 2
  local fault=()
  [ "$stop" -gt 0 ] && fault=(env "PACTRAIN_FAULT=exit:$stop:0")
  echo "== $ranks ranks$([ "$stop" -gt 0 ] && echo ", to step $stop")" >> "$log"
  "${fault[@]}" mpirun --oversubscribe -np "$ranks" "$build/pactrain" train --config "$recipe" \
    --metrics "$metrics" --checkpoint "$checkpoint" --checkpoint-every "$every" "$@" \
    >> "$log" 2>&1 || [ "$stop" -gt 0 ]
}

part "$a" $((every + 1))
part "$b" $((2 * every + 1)) --resume "$checkpoint"
part "$a" 0 --resume "$checkpoint"
grep '"kind":"epoch"' "$metrics" | tail -1
