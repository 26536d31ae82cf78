#!/usr/bin/env bash
# The head-to-head on the bandwidth-limited testbed (scripts/testbed; by default in hosts mode,
# every rank on its own shaped link as on a cluster; --mode shared puts them on one): at each rate,
# the link is calibrated, then ResNet-18 and the ViT train for a few steps with every method,
# ours (dense, fp16, topk with DGC's settings, terngrad, powersgd rank 2 and 4, pactrain at 80% and
# 90% as fp32 and ternary) and PyTorch DDP's (allreduce, fp16_compress_hook, powerSGD_hook rank 2
# and 4), plus our compute-only throughput (one rank, no communication, times the rank count).
# Results are appended to OUT/results.jsonl; bench/report_testbed.py turns them into tables and
# plots. Needs root (network namespaces). --models also takes the language models gpt-nano and
# gpt-mini (--batch is then sequences of their context, e.g. 4 for gpt-mini).
#   bench/run_testbed.sh [--rates 100mbit,500mbit,1gbit] [--models resnet18,vit] [--ranks 2]
#                        [--steps 4] [--batch 32] [--methods LIST] [--mode hosts|shared]
#                        [--out out/testbed]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rates=100mbit,500mbit,1gbit models=resnet18,vit ranks=2 steps=4 batch=32 methods="" mode=hosts
out="$root/out/testbed"
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_testbed.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "${BUILD_DIR:-}" ] || "$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torch python3-torchvision  # the PyTorch DDP peer methods
mkdir -p "$out"
first=1
for rate in ${rates//,/ }; do
  list="$methods"
  if [ -z "$list" ]; then
    # Compute-only does not depend on the link: measured once.
    list=$(/usr/bin/python3 -c "import sys; sys.path.insert(0, '$root/bench'); import testbed_bench as t; print(','.join((['compute-only'] if $first else []) + list(t.OURS) + list(t.PEERS)))")
  fi
  first=0
  "$root/scripts/testbed" --mode "$mode" --rate "$rate" --ranks "$ranks" -- /usr/bin/python3 \
    "$root/bench/testbed_bench.py" --rate "$rate" --out "$out/results.jsonl" --models "$models" \
    --methods "$list" --ranks "$ranks" --steps "$steps" --batch "$batch"
done
echo "results: $out/results.jsonl (bench/report_testbed.py $out/results.jsonl)"
