#!/usr/bin/env bash
# What the metrics say a step sent is what it must send: 2 ranks train a ResNet-20 pruned to 80%
# at step 0 with pactrain's fp32 values, and every step record's gradient_bytes must be 4 bytes
# per kept gradient entry (the kept entries of the masked weights, counted here from the masks in
# the checkpoint, and every entry of the unmasked parameters), its verdict_bytes the 4 of the
# step's finiteness verdict, and bytes_sent their sum: on 2 ranks a ring all-reduce sends each
# value once. The pruning event's own traffic
# (scores, masks, checksums) is reported apart, on the first step only.
# Usage: tests/mpi_gradient_bytes.sh PACTRAIN MPIEXEC
set -euo pipefail
pactrain="$1" mpiexec="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$mpiexec" --oversubscribe -n 2 "$pactrain" train --model resnet20 --data synthetic \
  --synthetic-size 256 --image-size 16 --batch 16 --max-steps 6 --threads 1 --quiet \
  --log-every 1 --prune magnitude --sparsity 0.8 --prune-schedule oneshot:0 \
  --compress pactrain --metrics "$work/run.jsonl" --checkpoint "$work/run.safetensors"
python3 - "$work/run.safetensors" "$work/run.jsonl" <<'PY'
import json, struct, sys
path, metrics = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    data = f.read()
header.pop("__metadata__", None)
def numel(info):
    count = 1
    for d in info["shape"]:
        count *= d
    return count
names = [k for k in header if not k.startswith(("optimizer.", "pruner.", "reducer.", "rank")) and not k.endswith(".mask")]
params = [k for k in names if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
kept = 0
for name in params:
    mask = header.get(name + ".mask")
    if mask is None:
        kept += numel(header[name])
    else:
        begin, end = mask["data_offsets"]
        kept += sum(1 for b in data[begin:end] if b)
expected = 4 * kept
steps = [json.loads(line) for line in open(metrics) if '"kind":"step"' in line]
print(f"kept gradient entries {kept}: expected {expected} gradient bytes a step, and 4 for the verdict")
bad = [(r["step"], r["gradient_bytes"], r["verdict_bytes"], r["bytes_sent"]) for r in steps
       if (r["gradient_bytes"], r["verdict_bytes"], r["bytes_sent"]) != (expected, 4, expected + 4)]
if bad or len(steps) != 6:
    sys.exit(f"steps whose (gradient, verdict, all) bytes differ: {bad} (of {len(steps)} steps)")
if steps[0]["pruning_bytes"] == 0 or any(r["pruning_bytes"] for r in steps[1:]):
    sys.exit("pruning_bytes: expected the event's traffic on step 1 only, got "
             + str([r["pruning_bytes"] for r in steps]))
print(f"every step sent {expected} gradient bytes and 4 for the verdict; the pruning event "
      f"{steps[0]['pruning_bytes']} apart")
PY
