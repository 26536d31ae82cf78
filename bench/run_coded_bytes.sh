#!/usr/bin/env bash
# Bytes per step of pactrain's ternary sums with each packed wire (--packed-wire fields, coded),
# on several rank counts: ResNet-20 pruned once to 80% by magnitude, synthetic 28x28 images, a
# global batch of about 128, the accuracy recipe's 4 / 8 kB wire buckets, 20 steps on loopback
# (bytes do not depend on the link, so no testbed is needed), the mean over steps 3-20. Appends
# one line per run to OUT/bytes.jsonl; `bench/scaleout.py --bytes OUT/bytes.jsonl` fits the
# model's bits per Rice-coded sum on 2, 4 and 8 ranks and checks it on the others.
#   bench/run_coded_bytes.sh [--ranks 2,3,4,6,8] [--out DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks_list=2,3,4,6,8 out="$root/out/coded-bytes"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks_list="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_coded_bytes.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
build="${BUILD_DIR:-$root/build}"
[ -n "${BUILD_DIR:-}" ] || "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
for ranks in ${ranks_list//,/ }; do
  [[ "$ranks" =~ ^[0-9]+$ ]] && [ "$ranks" -ge 2 ] ||
    { echo "run_coded_bytes.sh: --ranks takes rank counts of 2 or more, not '$ranks'" >&2; exit 2; }
  batch=$((128 / ranks))
  for wire in fields coded; do
    metrics="$tmp/r$ranks-$wire.jsonl"
    mpirun --oversubscribe -n "$ranks" "$build/pactrain" train --model resnet20 --in-channels 1 \
      --image-size 28 --num-classes 10 --data synthetic --synthetic-size 3200 --test-subset 8 \
      --epochs 1 --batch "$batch" --max-steps 20 --threads 1 --log-every 1 --quiet \
      --metrics "$metrics" --prune magnitude --sparsity 0.8 --prune-schedule oneshot:0 \
      --compress pactrain --compress-opt enc=ternary --first-bucket-mb 0.004 --bucket-mb 0.008 \
      --packed-wire "$wire" > "$tmp/log" 2>&1 ||
      { cat "$tmp/log" >&2
        echo "run_coded_bytes.sh: $ranks ranks, $wire: the run failed" >&2; exit 1; }
    /usr/bin/python3 - "$metrics" "$ranks" "$wire" "$batch" "$commit" >> "$out/bytes.jsonl" <<'PY'
import datetime, json, sys
path, ranks, wire, batch, commit = sys.argv[1:]
steps = [r for r in map(json.loads, open(path)) if r.get("kind") == "step" and r["step"] > 2]
print(json.dumps({"ranks": int(ranks), "wire": wire, "batch": int(batch),
                  "bytes_per_step": sum(r["bytes_sent"] for r in steps) / len(steps),
                  "exchanges": sum(r["exchanges"] for r in steps) / len(steps),
                  "date": datetime.date.today().isoformat(), "commit": commit}))
PY
    tail -1 "$out/bytes.jsonl"
  done
done
echo "results: $out/bytes.jsonl (bench/scaleout.py --bytes $out/bytes.jsonl)"
