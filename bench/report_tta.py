#!/usr/bin/python3
"""Time to accuracy on a narrow link, from two measurements (bench/run_time_to_accuracy.sh):
  - each method's learning curve: test accuracy after every epoch and the bytes it sent per step,
    from its 15-epoch run without shaping (bench/run_accuracy.sh, out/accuracy/RUN.jsonl);
  - each method's step time on the shaped link, per rate (bench/testbed_bench.py in
    scripts/testbed, OUT/steps.jsonl): the same model and per-rank batch, a few steps.
A method's wall time for an epoch is its steps per epoch times its shaped step time. A pruned run
sends more in its early epochs than with its final masks, which is what the shaped step time was
measured with, so its epochs before the last pruning event are charged the extra bytes at the
link's calibrated rate: step time + (that epoch's bytes - the final bytes) / rate. Evaluation time
is left out (the same for every method). Prints Markdown; --plot draws accuracy against wall time.
Several --steps files (repeated timing runs on a noisy machine) give each method the median of
its step times across them.
--measured takes runs trained end to end on the shaped link instead (bench/run_accuracy.sh inside
scripts/testbed, saved as NAME-at-RATE): their own wall time after every epoch, evaluations
included, with no model in between.
With --ranks N it joins the curves of runs on N ranks (bench/run_accuracy.sh's -ranksN suffix, the
same global batch) with the step times measured on N ranks (2 by default: runs without a suffix).
Usage: report_tta.py --curves DIR --steps FILE [FILE ...] [--target 0.925] [--model resnet20]
                     [--ranks N] [--plot FILE.svg]
       report_tta.py --measured RUN.jsonl [RUN.jsonl ...] [--target 0.925] [--plot FILE.png]"""
import argparse
import collections
import json
import os
import re
import statistics
import sys

# Accuracy runs (bench/run_accuracy.sh names) and the testbed methods that time them.
METHODS = collections.OrderedDict([
    ("dense", "dense"), ("fp16", "fp16"), ("topk", "topk"), ("randomk", "randomk"),
    ("terngrad", "terngrad"), ("powersgd2", "powersgd2"), ("powersgd4", "powersgd4"),
    ("signsgd", "signsgd"), ("p80", "pactrain80-fp32"), ("t80", "pactrain80-ternary"),
    ("p90", "pactrain90-fp32"), ("t90", "pactrain90-ternary"),
    # The default codes in -3..3 (levels=3) since 2026-12-04; t80 and t90 runs made before used
    # levels=1, which the -levels1 runs ask for by name.
    ("t80-levels3", "pactrain80-ternary"), ("t90-levels3", "pactrain90-ternary"),
    ("t80-levels1", "pactrain80-ternary-levels1"), ("t90-levels1", "pactrain90-ternary-levels1"),
    # The 1-D parameters in bf16 (--compress-opt enc1d=bf16).
    ("t80-bf16oned", "pactrain80-ternary-bf16oned"),
    # topk before 2026-12-04: --momentum 0, so its weight decay had no momentum (DGC's has).
    ("topk-decay-unmoved", "topk"),
    # PyTorch's post-local SGD and DiLoCo: torch-local32 times as the testbed's torch-local32.
    ("torch", "torch"),
    ("torch-allreduce", "torch-allreduce"), ("torch-fp16", "torch-fp16"),
    ("torch-powersgd2", "torch-powersgd2"), ("torch-powersgd4", "torch-powersgd4")])
LABELS = {"torch": "PyTorch", "p80": "pactrain 80% fp32", "t80": "pactrain 80% ternary", "p90": "pactrain 90% fp32",
          "t90": "pactrain 90% ternary", "t80-levels3": "pactrain 80% levels=3",
          "t90-levels3": "pactrain 90% levels=3", "t80-levels1": "pactrain 80% levels=1",
          "t90-levels1": "pactrain 90% levels=1", "topk": "topk (DGC 0.1%)",
          "t80-bf16oned": "pactrain 80% ternary, 1-D parameters in bf16",
          "topk-decay-unmoved": "topk (DGC 0.1%), weight decay without momentum",
          "randomk": "randomk (1%)", "powersgd2": "powersgd rank 2", "powersgd4": "powersgd rank 4",
          "torch-allreduce": "PyTorch DDP", "torch-fp16": "PyTorch DDP fp16 hook",
          "torch-powersgd2": "PyTorch DDP PowerSGD rank 2",
          "torch-powersgd4": "PyTorch DDP PowerSGD rank 4"}


# A shorter pruning ramp (-rampE or -rampS-E, bench/run_accuracy.sh) ends with the same masks.
RAMP = re.compile(r"-ramp(?:([0-9]+)-)?([0-9]+)(?=-|$)")
# So does pruning once at the first step by a criterion (-initCRIT): the same sparsity, no ramp.
INIT = re.compile(r"-init(magnitude|snip|grasp|synflow)(?=-|$)")


RANKS = re.compile(r"-ranks([0-9]+)(?=-seed[0-9]+$|$)")


# A run trained end to end on the shaped link (bench/run_accuracy.sh in scripts/testbed) is saved
# as NAME-at-RATE; its curve is NAME's, so it is modelled like any other where NAME has no curve.
SHAPED = re.compile(r"-at-[0-9.]+[kmg]?bit$")


def run_ranks(run):
    """'t80-ranks8-seed2' -> 8; a run without the suffix trained on 2 ranks."""
    m = RANKS.search(SHAPED.sub("", run))
    return int(m.group(1)) if m else 2


def split_seed(run):
    """'t80-levels3-seed2' -> ('t80-levels3', 2); a run without the suffix has seed 1."""
    m = re.match(r"^(.+)-seed([0-9]+)$", run)
    return (m.group(1), int(m.group(2))) if m else (run, 1)


def testbed_method(run):
    """The testbed's name for an accuracy run: METHODS, keeping a -localH / -dilocoH suffix
    (a bare localH / dilocoH is dense's); a -seedN suffix times as the run without it."""
    run = RANKS.sub("", split_seed(SHAPED.sub("", run))[0])  # the ranks select the step times
    run = INIT.sub("", RAMP.sub("", run))  # a shorter ramp, or none, times as the run with it
    m = re.match(r"^(?:(.*)-)?(local|diloco)([0-9]+)$", run)
    if not m:
        return METHODS.get(run)
    base = METHODS.get(m.group(1) or "dense")
    return f"{base}-{m.group(2)}{m.group(3)}" if base else None


def label(run):
    shaped = SHAPED.search(run)
    if shaped:
        rate = shaped.group(0)[len("-at-"):]
        return f"{label(SHAPED.sub('', run))} (the curve of its run at {rate})"
    run, seed = split_seed(run)
    run = RANKS.sub("", run)
    if seed != 1:
        return f"{label(run)}, seed {seed}"
    init = INIT.search(run)
    if init:
        return f"{label(run.replace(init.group(0), ''))}, pruned by {init.group(1)} at the first step"
    ramp = RAMP.search(run)
    if ramp:
        start = "" if ramp.group(1) is None else (
            " from the first step" if ramp.group(1) == "0" else f" from epoch {ramp.group(1)}")
        return f"{label(run.replace(ramp.group(0), ''))}, ramp{start} to epoch {ramp.group(2)}"
    m = re.match(r"^(?:(.*)-)?(local|diloco)([0-9]+)$", run)
    if not m:
        return LABELS.get(run, run)
    return f"{LABELS.get(m.group(1) or 'dense', m.group(1) or 'dense')}, {m.group(2)}:{m.group(3)}"


def curve(path):
    """Per epoch: (test accuracy, mean bytes per step) of one accuracy run."""
    records = [json.loads(line) for line in open(path) if line.strip()]
    epochs = sorted((r for r in records if r["kind"] == "epoch"), key=lambda r: r["epoch"])
    out = []
    for e in epochs:
        out.append((e["test_acc"], epoch_bytes_per_step(records, e)))
    return out


def epoch_bytes_per_step(records, epoch, steps_per_epoch=468):
    """Bytes per step over one epoch: the epoch record's own figure where it has one (since
    2026-12-04); else from the step records, which are a sample (every --log-every steps) plus,
    in a --sync run, every step that synchronised, the only ones that send: their sum over the
    epoch's steps."""
    if "bytes_per_step" in epoch:
        return epoch["bytes_per_step"]
    steps = [r for r in records if r["kind"] == "step" and r["epoch"] == epoch["epoch"]]
    if not steps:
        return 0.0
    if any(r.get("outer_s", 0.0) > 0.0 for r in steps):
        return sum(r["bytes_sent"] for r in steps) / steps_per_epoch
    return sum(r["bytes_sent"] for r in steps) / len(steps)


def measured(paths, target, plot):
    """Time to `target` of end-to-end runs, from the wall time each epoch record carries."""
    rows, series = [], {}
    for path in paths:
        run = os.path.basename(path)[:-len(".jsonl")]
        records = [json.loads(line) for line in open(path) if line.strip()]
        epochs = sorted((r for r in records if r["kind"] == "epoch"), key=lambda r: r["epoch"])
        if not epochs or any("wall_s" not in e for e in epochs):
            sys.exit(f"report_tta: {path} has no wall time per epoch; --measured needs the "
                     "epoch records of a run trained end to end (bench/run_accuracy.sh)")
        hit = next((e for e in epochs if e["test_acc"] >= target), None)
        rows.append((hit["wall_s"] if hit else float("inf"), run, hit, epochs))
        series[run] = [(e["wall_s"], e["test_acc"]) for e in epochs]
    rows.sort(key=lambda row: row[0])
    print(f"| run | epochs to {100 * target:.1f}% | wall s to {100 * target:.1f}% | best accuracy "
          "| final accuracy | epochs | wall s in all |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for _, run, hit, epochs in rows:
        best = max(e["test_acc"] for e in epochs)
        epoch, wall = ((str(hit["epoch"] + 1), f"{hit['wall_s']:,.0f}") if hit else
                       ("not reached", "not reached"))
        print(f"| {run} | {epoch} | {wall} | {100 * best:.2f}% | "
              f"{100 * epochs[-1]['test_acc']:.2f}% | {len(epochs)} | {epochs[-1]['wall_s']:,.0f} |")
    if plot:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for run, points in series.items():
            ax.plot([x / 60 for x, _ in points], [100 * y for _, y in points], marker="o",
                    markersize=3, label=run)
        ax.axhline(100 * target, color="grey", linestyle=":", linewidth=1)
        ax.set_title("trained end to end on the shaped link")
        ax.set_xlabel("wall time, evaluations included (minutes)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(80, 95)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot)


def rate_mbit(rate):
    """A tc rate ("2500kbit", "10mbit", "1gbit") in Mbit/s, for ordering the tables."""
    for unit, scale in (("kbit", 1e-3), ("mbit", 1.0), ("gbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    sys.exit(f"report_tta: a step record's rate {rate!r} is not a tc rate such as 10mbit")


def pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("report_tta: --plot needs matplotlib: apt-get install python3-matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--measured", nargs="+")
    p.add_argument("--curves")
    p.add_argument("--steps", nargs="+")
    p.add_argument("--target", type=float, default=0.925)
    p.add_argument("--model", default="resnet20")
    p.add_argument("--steps-per-epoch", type=int, default=468)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--plot")
    args = p.parse_args()
    if args.measured:
        return measured(args.measured, args.target, args.plot)
    if not args.curves or not args.steps:
        p.error("either --measured RUN.jsonl ... or both --curves and --steps")
    timed = {}
    repeats = collections.defaultdict(list)
    for path in args.steps:
        in_file = {}
        for line in open(path):
            r = json.loads(line)
            if r["model"] == args.model and r.get("ranks", 2) == args.ranks:
                in_file[(r["rate"], r["method"])] = r  # a rerun replaces the earlier one
        for key, r in in_file.items():
            repeats[key].append(r)
    for key, rs in repeats.items():
        rs = sorted(rs, key=lambda r: r["step_s"])
        timed[key] = dict(rs[len(rs) // 2], step_s=statistics.median(r["step_s"] for r in rs),
                          repeats=len(rs))
    rates = sorted({rate for rate, _ in timed}, key=rate_mbit)
    runs = []
    names = {name[:-len(".jsonl")] for name in os.listdir(args.curves) if name.endswith(".jsonl")}
    for run in sorted(names):
        if SHAPED.search(run) and SHAPED.sub("", run) in names:
            continue  # the unshaped run's curve stands for it
        if run_ranks(run) == args.ranks and testbed_method(run):
            runs.append((run, testbed_method(run)))
    if not runs or not rates:
        sys.exit("report_tta: no curves of {} ranks in {} or no step times for {} on {} ranks in "
                 "{}".format(args.ranks, args.curves, args.model, args.ranks,
                             ", ".join(args.steps)))
    series = {}
    for rate in rates:
        modes = {timed[(rate, m)].get("mode", "?") for _, m in runs if (rate, m) in timed}
        link = next(timed[(rate, m)]["link_mbit"] for _, m in runs if (rate, m) in timed)
        print(f"**{args.model}, {rate}** ({', '.join(sorted(modes))} mode, calibrated "
              f"{link:.1f} Mbit/s per rank; curves: 15-epoch runs without shaping)\n")
        print(f"| method | step s on the link | bytes/step (last epoch) | epochs to "
              f"{100 * args.target:.1f}% | wall s to {100 * args.target:.1f}% | best accuracy | "
              "wall s for 15 epochs |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        rows = []
        for run, method in runs:
            if (rate, method) not in timed:
                continue
            t = timed[(rate, method)]
            epochs = curve(os.path.join(args.curves, run + ".jsonl"))
            if not epochs:  # a run still in its first epoch
                continue
            final_bytes = epochs[-1][1]
            wall, reached, reached_epoch, points = 0.0, None, None, []
            for i, (acc, sent) in enumerate(epochs):
                extra = max(0.0, sent - final_bytes) * 8 / (link * 1e6)
                wall += args.steps_per_epoch * (t["step_s"] + extra)
                points.append((wall, acc))
                if reached is None and acc >= args.target:
                    reached, reached_epoch = wall, i + 1
            best = max(acc for acc, _ in epochs)
            rows.append((reached if reached is not None else float("inf"), run, t, final_bytes,
                         reached_epoch, reached, best, wall))
            series[(rate, run)] = points
        rows.sort(key=lambda row: row[0])
        for _, run, t, sent, epoch, reached, best, wall in rows:
            print(f"| {label(run)} | {t['step_s']:.3f} | {sent:,.0f} | "
                  f"{epoch if epoch else 'not reached'} | "
                  f"{f'{reached:,.0f}' if reached else 'not reached'} | {100 * best:.2f}% | "
                  f"{wall:,.0f} |")
        print()
    if args.plot:
        plt = pyplot()
        fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 4.5), squeeze=False)
        for ax, rate in zip(axes[0], rates):
            for run, _ in runs:
                if (rate, run) in series:
                    xs, ys = zip(*series[(rate, run)])
                    ax.plot([x / 3600 for x in xs], [100 * y for y in ys], marker="o",
                            markersize=3, label=label(run))
            ax.axhline(100 * args.target, color="grey", linestyle=":", linewidth=1)
            ax.set_title(f"{args.model}, {args.ranks} ranks, {rate} per rank")
            ax.set_xlabel("wall time (hours)")
            ax.set_ylabel("test accuracy (%)")
            ax.set_ylim(80, 95)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot)


if __name__ == "__main__":
    main()
