#!/usr/bin/python3
"""Keeps a learning curve in the repository: the epoch records of an accuracy run's metrics file
(bench/run_accuracy.sh writes out/accuracy/RUN.jsonl, which holds every logged step too and is
not committed) copied to docs/curves/RUN.jsonl, one line per epoch: epoch, test_acc, test_loss,
train_loss, bytes_per_step, wall_s. bench/report_tta.py reads either file, so the
time-to-accuracy tables of docs/results.md can be rebuilt from a clean checkout with
`bench/report_tta.py --curves docs/curves --steps STEPS.jsonl`.
Usage: save_curve.py out/accuracy/RUN.jsonl [...] [--into docs/curves]"""
import argparse
import json
import os
import sys

from report_tta import epoch_bytes_per_step

KEYS = ("kind", "epoch", "test_acc", "test_loss", "train_loss", "bytes_per_step", "wall_s")


def epochs_of(path):
    """The epoch records, each with its bytes per step (from the step records where the run's
    epoch records do not carry it: the PyTorch peers')."""
    records = []
    for number, line in enumerate(open(path), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            sys.exit(f"save_curve: {path}:{number} is not JSON ({e})")
    epochs = []
    for record in records:
        if record.get("kind") == "epoch":
            kept = {k: record[k] for k in KEYS if k in record}
            kept["bytes_per_step"] = epoch_bytes_per_step(records, record)
            epochs.append(kept)
    return epochs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("metrics", nargs="+")
    p.add_argument("--into", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "docs", "curves"))
    args = p.parse_args()
    os.makedirs(args.into, exist_ok=True)
    for path in args.metrics:
        epochs = epochs_of(path)
        if not epochs or any("test_acc" not in e for e in epochs):
            sys.exit(f"save_curve: {path} has no epoch records with a test accuracy (a run still "
                     "in its first epoch, or not an accuracy run's metrics file?)")
        target = os.path.join(args.into, os.path.basename(path))
        # Written whole, then renamed: a curve already there is never left half-written.
        with open(target + ".tmp", "w") as f:
            for record in epochs:
                f.write(json.dumps(record) + "\n")
        os.replace(target + ".tmp", target)
        print(f"{target}: {len(epochs)} epochs, final test accuracy "
              f"{100 * epochs[-1]['test_acc']:.2f}%")


if __name__ == "__main__":
    main()
