#!/usr/bin/env bash
# Time-to-accuracy on the bandwidth-limited testbed: ResNet-20 on Fashion-MNIST, 2 ranks (batch 64
# each), one-cycle learning rate over --epochs, each method trained at each rate inside
# scripts/testbed; the wall time at which the test accuracy (evaluated after every epoch) first
# reaches --target. pactrain prunes gradually to 80% over the first epoch (global magnitude, the
# first convolution excluded) and sends the kept entries ternary-coded with error feedback.
# Results: OUT/<rate>-<method>.jsonl (the trainer's metrics) and a table on stdout. Needs root.
#   bench/run_time_to_accuracy.sh [--rates 100mbit,1gbit] [--methods dense,fp16,topk,powersgd,pactrain]
#                                 [--epochs 3] [--target 0.89] [--out out/time-to-accuracy]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
rates=100mbit,1gbit methods=dense,fp16,topk,powersgd,pactrain epochs=3 target=0.89
out="$root/out/time-to-accuracy"
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_time_to_accuracy.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "${BUILD_DIR:-}" ] || "$root/scripts/build.sh" >/dev/null
mkdir -p "$out"
# The optimizer's momentum is 0.9, except for topk, whose DGC momentum correction replaces it.
recipe=(--model resnet20 --data fashion-mnist --epochs "$epochs" --batch 64 --lr 0.1
        --weight-decay 5e-4 --schedule onecycle --crop-padding 4 --flip --seed 1
        --threads 1 --quiet)
for rate in ${rates//,/ }; do
  for method in ${methods//,/ }; do
    case "$method" in
      dense | fp16) extra=(--momentum 0.9 --nesterov --compress "$method") ;;
      topk) extra=(--momentum 0 --compress topk --compress-opt ratio=0.001
                   --compress-opt momentum=0.9 --compress-opt warmup_steps=468) ;;
      powersgd) extra=(--momentum 0.9 --nesterov --compress powersgd --compress-opt rank=4) ;;
      pactrain) extra=(--momentum 0.9 --nesterov --compress pactrain --compress-opt enc=ternary --compress-opt ef=1
                       --prune magnitude --sparsity 0.8 --prune-scope global
                       --prune-exclude conv1.weight --prune-schedule gradual:0:468:39) ;;
      *) echo "unknown method '$method'; expected dense, fp16, topk, powersgd or pactrain" >&2; exit 2 ;;
    esac
    metrics="$out/$rate-$method.jsonl"
    rm -f "$metrics"
    "$root/scripts/testbed" --rate "$rate" -- mpiexec --oversubscribe -n 2 "$build/pactrain" train \
      "${recipe[@]}" "${extra[@]}" --metrics "$metrics" >/dev/null 2>&1 ||
      echo "$rate $method: the run failed" >&2
  done
done
/usr/bin/python3 - "$out" "$target" "$rates" "$methods" <<'PY'
import json, os, sys
out, target, rates, methods = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(","), sys.argv[4].split(",")
print(f"| rate | method | wall s to {100 * target:.0f}% | best test accuracy | wall s in all |")
print("|---|---|---:|---:|---:|")
for rate in rates:
    for method in methods:
        path = os.path.join(out, f"{rate}-{method}.jsonl")
        if not os.path.exists(path):
            continue
        epochs = [json.loads(l) for l in open(path) if '"kind":"epoch"' in l]
        if not epochs:
            continue
        reached = next((e["wall_s"] for e in epochs if e["test_acc"] >= target), None)
        best = max(e["test_acc"] for e in epochs)
        print(f"| {rate} | {method} | {reached:.0f} |" if reached else f"| {rate} | {method} | not reached |",
              f"{100 * best:.2f}% | {epochs[-1]['wall_s']:.0f} |")
PY
