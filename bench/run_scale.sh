#!/usr/bin/env bash
# Every method's step on 2, 4 and 8 ranks, each rank on its own shaped link (scripts/testbed
# --mode hosts), the rate scaled with the ranks so that the link keeps its ratio to compute:
# 8 ranks on this 2-core machine compute about 4x slower each than 2, so 2 ranks get 10 Mbit/s,
# 4 get 5 and 8 get 2.5. ResNet-20, batch 32 per rank, 10 timed steps after 2 warm-up steps; the
# coded methods (pactrain ternary, EF-signSGD, DGC's top-k) with the accuracy recipe's 4 / 8 kB
# wire buckets, the others with its fp32 buckets (bench/run_accuracy.sh), and the compute-only
# step of each rank count. Appends to OUT/steps.jsonl (default out/scale); `bench/scaleout.py
# --hosts OUT/steps.jsonl` fits the step model on 2 and 4 ranks and checks it on 8. Needs root.
#   bench/run_scale.sh [--ranks 2,4,8] [--out DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks_list=2,4,8 out="$root/out/scale"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks_list="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_scale.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "${BUILD_DIR:-}" ] || "$root/scripts/build.sh" >/dev/null
mkdir -p "$out"
coded=signsgd,topk,pactrain80-ternary
fp32=compute-only,dense,fp16,terngrad,powersgd4,pactrain80-fp32
for ranks in ${ranks_list//,/ }; do
  case "$ranks" in
    2) rate=10mbit ;; 4) rate=5mbit ;; 8) rate=2500kbit ;;
    *) echo "run_scale.sh: no rate chosen for $ranks ranks (2, 4 or 8)" >&2; exit 2 ;;
  esac
  for set in fp32 coded; do
    extra=()
    [ "$set" = coded ] && extra=(--extra "--first-bucket-mb 0.004 --bucket-mb 0.008")
    methods=$fp32
    [ "$set" = coded ] && methods=$coded
    "$root/scripts/testbed" --mode hosts --rate "$rate" --ranks "$ranks" -- /usr/bin/python3 \
      "$root/bench/testbed_bench.py" --rate "$rate" --out "$out/steps.jsonl" --models resnet20 \
      --methods "$methods" --ranks "$ranks" --steps 10 --batch 32 "${extra[@]}"
  done
done
echo "results: $out/steps.jsonl (bench/scaleout.py --hosts $out/steps.jsonl)"
