#!/usr/bin/env bash
# Time to accuracy on narrow links: ResNet-20 on Fashion-MNIST, 2 ranks, the 15-epoch recipe of
# docs/results.md. Two measurements, joined by bench/report_tta.py:
#   1. each method's learning curve, from its 15-epoch run without shaping (bench/run_accuracy.sh;
#      runs that already exist in out/accuracy are reused, missing ones are run: ~25 minutes each);
#   2. each method's step time on the testbed, every rank on its own shaped link
#      (scripts/testbed --mode hosts), batch 64 per rank as in the recipe, a few steps.
# Prints the tables (and with --plot, draws accuracy against wall time). Needs root.
#   bench/run_time_to_accuracy.sh [--rates 10mbit,100mbit] [--runs dense,topk,t80,...]
#                                 [--target 0.925] [--steps 6] [--plot FILE.svg]
#                                 [--out out/time-to-accuracy]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
rates=10mbit,100mbit target=0.925 steps=6 plot="" out="$root/out/time-to-accuracy"
runs=dense,fp16,topk,randomk,terngrad,powersgd2,powersgd4,signsgd,p80,t80,p90,t90
runs="$runs,torch-fp16,torch-powersgd2,torch-powersgd4"
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --target) target="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_time_to_accuracy.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "${BUILD_DIR:-}" ] || "$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torch python3-torchvision  # the PyTorch DDP peers
[ -z "$plot" ] || "$root/scripts/setup.sh" python3-matplotlib
mkdir -p "$out"
# The testbed's name for each accuracy run.
method_of() {
  /usr/bin/python3 -c "import sys; sys.path.insert(0, '$root/bench'); import report_tta as r; print(r.testbed_method('$1') or '')"
}
methods=""
for run in ${runs//,/ }; do
  method="$(method_of "$run")"
  [ -n "$method" ] || { echo "run_time_to_accuracy.sh: no testbed method times '$run'" >&2; exit 2; }
  [ -f "$root/out/accuracy/$run.jsonl" ] || BUILD_DIR="$build" "$root/bench/run_accuracy.sh" "$run"
  methods="$methods${methods:+,}$method"
done
for rate in ${rates//,/ }; do
  "$root/scripts/testbed" --mode hosts --rate "$rate" --ranks 2 -- /usr/bin/python3 \
    "$root/bench/testbed_bench.py" --rate "$rate" --out "$out/steps.jsonl" --models resnet20 \
    --methods "$methods" --ranks 2 --steps "$steps" --batch 64
done
/usr/bin/python3 "$root/bench/report_tta.py" --curves "$root/out/accuracy" --steps "$out/steps.jsonl" \
  --target "$target" ${plot:+--plot "$plot"}
