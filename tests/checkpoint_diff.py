#!/usr/bin/env python3
"""How far one checkpoint's weights are from another's, against what one step moves them.

Usage: checkpoint_diff.py RESUMED STRAIGHT STRAIGHT_ONE_STEP_EARLIER FRACTION

Compares the model's weights (every f32 tensor but the optimizer's, the pruner's, the reducer's,
the ranks' state and the masks) of RESUMED and STRAIGHT, and measures the last step's movement as
STRAIGHT against STRAIGHT_ONE_STEP_EARLIER. Passes (exit 0) when the largest difference is below
FRACTION times the largest movement. Reads safetensors with the standard library alone."""
import json
import struct
import sys
from array import array

STATE_PREFIXES = ("optimizer.", "pruner.", "reducer.", "rank")


def weights(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] != "F32":
            continue
        if name.startswith(STATE_PREFIXES) or name.endswith(".mask"):
            continue
        begin, end = entry["data_offsets"]
        values = array("f")
        values.frombytes(data[begin:end])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = values
    return out


def largest_difference(a, b):
    if a.keys() != b.keys():
        sys.exit(f"the checkpoints hold different weights: {sorted(a.keys() ^ b.keys())[:5]}")
    worst, where = 0.0, ""
    for name in a:
        d = max((abs(x - y) for x, y in zip(a[name], b[name])), default=0.0)
        if d > worst:
            worst, where = d, name
    return worst, where


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    resumed, straight, earlier = (weights(p) for p in sys.argv[1:4])
    fraction = float(sys.argv[4])
    difference, where = largest_difference(resumed, straight)
    movement, _ = largest_difference(straight, earlier)
    report = (f"weights within {difference:.3g} of the straight run's (largest in {where}); "
              f"its last step moved them by up to {movement:.3g}: "
              f"{difference / movement:.2%} of a step, bound {fraction:.0%}")
    print(report)
    return 0 if movement > 0 and difference < fraction * movement else 1


if __name__ == "__main__":
    sys.exit(main())
