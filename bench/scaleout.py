#!/usr/bin/python3
"""A scale-out model of one data-parallel step, calibrated on the testbed and used to project past
one machine.

One step of method m on P ranks with links of B bit/s and per-message latency alpha:
    step = compute + codec + (1 - hidden) * comm
    comm = bytes_per_rank(m, P) * 8 / B_rank + messages(m, P) * alpha
where compute (the compute-only run) and codec are measured on the testbed, bytes_per_rank is
what a ring all-reduce (or all-gather, for topk) sends per rank, and `hidden` is the fraction of
communication that overlaps backward. On the shared testbed all P ranks send through one link of
rate B, so B_rank = B / P; on a cluster every rank has its own NIC, B_rank = B.

Calibration: alpha and hidden are fitted by least squares to every one of our 2-rank runs in the
testbed results (all methods, all rates), and the error of the fitted model against each
measurement is printed.

Projection: for ResNet-50, ViT-B/16 and a GPT-2-small-sized model, P = 8 to 1024 and 1, 10 and
100 Gbit/s per rank, with a cluster's per-message latency (--latency-us, default 25) in place of
the testbed's fitted overhead. Their compute time is not measured here (no GPU): it is FLOPs per step over an
assumed sustained rate (--tflops, default 40: what ResNet-50 training reaches on an A100-class GPU,
about 2,500 images/s), and codec passes are memory-bound at --hbm-gbs (default 2000 GB/s), one read and one write
of the values per pass, with the pass counts our compressors report. Those assumptions are printed
with the results. A method "stops paying off" where its throughput falls below dense's, or where
its scaling efficiency (throughput over P times one rank's compute-only throughput) falls below 50%.

pactrain's ternary bytes are those of the MPI group's ring, whose partial sums travel narrower and
as Rice codes where shorter (ternary_sum_bits below; `--bytes` fits and checks it on measured
runs). NCCL sums whole words, so on a GPU cluster they are the fields' bytes of all P ranks.

Usage: scaleout.py RESULTS.jsonl [--plots DIR] [--tflops T] [--hbm-gbs G] [--latency-us L]
       scaleout.py --hosts RUNS.jsonl ... [--held-out-ranks 8] [projection options]
       scaleout.py --visible V [projection options]    (project with a given fit)
       scaleout.py --bytes BYTES.jsonl [--bytes-fit-ranks 2,4,8]"""
import argparse
import json
import math
import os
import sys

import report_testbed

RATE_BITS = {"100mbit": 1e8, "500mbit": 5e8, "1gbit": 1e9, "10gbit": 1e10}

# Projected models: parameters (all but ~1% in matrices that pruning and PowerSGD act on), training
# FLOPs per sample (3x the forward), the per-rank batch, and PowerSGD's factor elements per
# parameter at rank 4 (sum of r (rows + cols) over the matrices, over the parameter count).
MODELS = {
    "ResNet-20": {"params": 0.27e6, "flops": 3 * 41e6, "batch": 128, "psgd4": 0.09},
    "ResNet-50": {"params": 25.6e6, "flops": 3 * 4.1e9, "batch": 64, "psgd4": 0.012},
    "ViT-B/16": {"params": 86.6e6, "flops": 3 * 17.6e9, "batch": 64, "psgd4": 0.0027},
    "GPT-2-small": {"params": 124e6, "flops": 3 * 2 * 124e6 * 1024, "batch": 8, "psgd4": 0.0034},
}
# Methods: bytes per gradient value on the wire, whether it is an all-gather (bytes grow with P)
# rather than an all-reduce, the fraction of values sent, and codec passes over the gradient.
METHODS = {
    "dense": {"bytes": 4, "density": 1.0, "gather": False, "passes": 1},
    "fp16": {"bytes": 2, "density": 1.0, "gather": False, "passes": 2},
    "terngrad": {"bytes": 1, "density": 1.0, "gather": False, "passes": 3},
    "topk": {"bytes": 8, "density": 0.001, "gather": True, "passes": 4},
    "signsgd": {"bytes": 1 / 8, "density": 1.0, "gather": True, "passes": 3},
    "powersgd4": {"bytes": 4, "density": None, "gather": False, "passes": 6},
    "pactrain80-fp32": {"bytes": 4, "density": 0.2, "gather": False, "passes": 1},
    "pactrain80-ternary": {"bytes": 1, "density": 0.2, "gather": False, "passes": 3},
    "pactrain90-ternary": {"bytes": 1, "density": 0.1, "gather": False, "passes": 3},
}


# pactrain's ternary codes (levels=3, the default) travel as t + 3 in 0..6. A ring all-reduce
# carries the sums of 1, 2, ..., P - 1 ranks in its reduce-scatter and of all P in its all-gather;
# the MPI group sends each run of them in fields as wide as its largest sum (63 // width to a
# 64-bit word), or as Rice codes of their distance from the run's mean where that is shorter
# (comm/coded_fields.h; the default wire). A Rice-coded sum of k ranks takes about
# RICE_BITS_ONE + RICE_BITS_PER_DOUBLING x log2(k) bits: the spread of a sum of k independent
# codes grows as the square root of k, half a bit per doubling; ResNet-20's sums grow a little
# faster. Fitted by least squares on ResNet-20 at 80% on 2, 4 and 8 ranks (bytes measured by
# bench/run_coded_bytes.sh, the fields' bytes telling the rest of the message apart), and checked
# on 3 and 6 ranks (`--bytes`; docs/results.md, "The scale-out model with coded sums"). Past the
# ranks it was fitted on, 0.64 a doubling overstates the bits of large sums, whose Rice codes come
# within a few hundredths of a bit of the half bit that their spread adds.
RICE_BITS_ONE = 2.30
RICE_BITS_PER_DOUBLING = 0.64
TERNARY_LEVELS = 3


def ternary_sum_bits(k, wire="coded"):
    """Bits per value of a sum of k ranks' codes on the wire: fields, or the shorter of fields
    and Rice codes."""
    fields = 64 / (63 // (2 * TERNARY_LEVELS * k).bit_length())
    if wire == "fields":
        return fields
    return min(fields, RICE_BITS_ONE + RICE_BITS_PER_DOUBLING * math.log2(k))


def ternary_bytes(p, wire="coded"):
    """Bytes per value of pactrain's ternary sums, averaged over the ring's 2(P - 1) messages (so
    that wire() can charge them as any ring's 2(P - 1) / P values per rank)."""
    if p < 2:
        return 0.0
    if p == 2:
        # Two ranks swap their whole messages once (recursive doubling): one rank's codes each.
        return ternary_sum_bits(1, wire) / 8
    bits = sum(ternary_sum_bits(k, wire) for k in range(1, p)) + (p - 1) * ternary_sum_bits(p, wire)
    return bits / (2 * (p - 1)) / 8


# ResNet-20 at 80% (`pactrain prune-report --prune magnitude --sparsity 0.8 --in-channels 1`): the
# kept weights travel as codes; what else a step sends (the 1-D parameters in fp32, the maxima,
# run headers) is read off the same run with the fields' wire, whose bytes are exact.
RESNET20_KEPT_WEIGHTS = 54123


def sum_terms(p):
    """Bits one rank sends per kept value, as x * RICE_BITS_ONE + y * RICE_BITS_PER_DOUBLING."""
    if p == 2:
        return 1.0, 0.0
    logs = sum(math.log2(k) for k in range(1, p)) + (p - 1) * math.log2(p)
    return 2 * (p - 1) / p, logs / p


def bytes_report(path, fit_ranks):
    """Fits RICE_BITS_* on the coded runs of `fit_ranks` in bench/run_coded_bytes.sh's FILE and
    prints the model against every run (its other rank counts held out)."""
    runs = [json.loads(line) for line in open(path) if line.strip()]
    fields = {r["ranks"]: r["bytes_per_step"] for r in runs if r["wire"] == "fields"}
    coded = {r["ranks"]: r["bytes_per_step"] for r in runs if r["wire"] == "coded"}
    ranks = sorted(p for p in coded if p in fields and p >= 2)
    n = RESNET20_KEPT_WEIGHTS

    def rest(p):  # what the step sends beyond the codes, from the fields' exact bytes
        return fields[p] - n * ternary_bytes(p, "fields") * 2 * (p - 1) / p  # as wire() charges

    points = [(*sum_terms(p), (coded[p] - rest(p)) * 8 / n) for p in ranks if p in fit_ranks]
    if len(points) < 2:
        sys.exit("scaleout.py: --bytes needs coded and fields runs on two of "
                 f"{sorted(fit_ranks)} ranks")
    one, per_doubling = least_squares_2(points)
    print(f"Rice-coded sums fitted on {len(points)} rank counts: {one:.2f} bits for one rank's "
          f"codes, {per_doubling:.2f} more per doubling of the ranks summed (the projection uses "
          f"{RICE_BITS_ONE} and {RICE_BITS_PER_DOUBLING}).\n")
    print("| ranks | fields bytes/step | coded bytes/step | predicted | error | held out |")
    print("|---:|---:|---:|---:|---:|---|")
    for p in ranks:
        x, y = sum_terms(p)
        predicted = rest(p) + n * (x * one + y * per_doubling) / 8
        err = (predicted - coded[p]) / coded[p]
        print(f"| {p} | {fields[p]:,.0f} | {coded[p]:,.0f} | {predicted:,.0f} | "
              f"{100 * err:+.1f}% | {'' if p in fit_ranks else 'yes'} |")
    print()


def ring_messages(p):
    return 2 * (p - 1)


def wire(method, spec, p):
    """Bytes one rank sends per step, and the messages it sends, for the model `spec`."""
    m = METHODS[method]
    density = spec["psgd4"] if method.startswith("powersgd") else m["density"]
    values = spec["params"] * density
    per_value = m["bytes"]
    if method.startswith("pactrain") and "ternary" in method:
        per_value = ternary_bytes(p)
    if m["gather"]:
        return (p - 1) * values * per_value, p - 1
    return 2 * (p - 1) / p * values * per_value, ring_messages(p)



def least_squares_2(points):
    """a and b minimising the squared error of t = a x + b y over (x, y, t) points (the 2x2 normal
    equations)."""
    sxx = sum(x * x for x, _, _ in points)
    sxy = sum(x * y for x, y, _ in points)
    syy = sum(y * y for _, y, _ in points)
    sx = sum(x * t for x, _, t in points)
    sy = sum(y * t for _, y, t in points)
    det = sxx * syy - sxy * sxy
    return (sx * syy - sy * sxy) / det, (sxx * sy - sxy * sx) / det


def fit(results):
    """Least squares for alpha and hidden over our measured 2-rank runs."""
    # Compute is the model's compute-only step: a compressor that waits for a collective inside
    # backward (terngrad's and pactrain ternary's scale) shows that wait as compute in its own
    # split, and here it belongs to communication.
    compute = {(r["model"], r["ranks"]): r["step_s"] for r in results
               if r["method"] == "compute-only"}
    runs = [r for r in results if r["impl"] == "pactrain" and r["method"] != "compute-only"
            and r["rate"] in RATE_BITS and r.get("bytes_per_step")
            and (r["model"], r["ranks"]) in compute]
    for r in runs:
        r["compute_s"] = compute[(r["model"], r["ranks"])]
    rows = []
    for r in runs:
        p = r["ranks"]
        rank_rate = RATE_BITS[r["rate"]] / p  # the shared link
        transfer = r["bytes_per_step"] * 8 / rank_rate
        # Messages: ring steps per bucket; buckets from the model's size (25 MB buckets).
        buckets = max(1, math.ceil(r["bytes_per_step"] / 25e6))
        messages = ring_messages(p) * buckets
        rows.append((r, transfer, messages))
    # step - compute - codec = (1 - h) * (transfer + messages * alpha): linear in (1 - h) and
    # (1 - h) * alpha.
    a, b = least_squares_2([(transfer, messages, r["step_s"] - r["compute_s"] - r["codec_s"])
                            for r, transfer, messages in rows])  # 1 - hidden, (1 - hidden) * alpha
    visible = min(max(a, 0.0), 1.0)
    alpha = max(b / a, 0.0) if a > 0 else 0.0
    errors = []
    for r, transfer, messages in rows:
        predicted = r["compute_s"] + r["codec_s"] + visible * (transfer + messages * alpha)
        errors.append((r, predicted, (predicted - r["step_s"]) / r["step_s"]))
    return visible, alpha, errors


def load_hosts(paths):
    """Step records of `bench/testbed_bench.py` runs in hosts mode (every rank its own link), with
    the compute-only step of the same rank count attached as `compute_alone_s`."""
    runs = []
    for path in paths:
        runs += [json.loads(line) for line in open(path) if line.strip()]
    runs = [r for r in runs if r.get("mode") == "hosts"]
    alone = {r["ranks"]: r["step_s"] for r in runs if r["method"] == "compute-only"}
    out = []
    for r in runs:
        if r["method"] == "compute-only" or r["ranks"] not in alone or not r.get("bytes_per_step"):
            continue
        r["compute_alone_s"] = alone[r["ranks"]]
        out.append(r)
    return out


def hosts_terms(r):
    """A hosts-mode run's link time for its bytes, and its exchanges, as measured."""
    return r["bytes_per_step"] * 8 / (r["link_mbit"] * 1e6), r["exchanges"]


def fit_hosts(runs):
    """step = compute alone + codec + visible * (bytes * 8 / B + exchanges * alpha), by least
    squares over `runs`: the two unknowns enter as visible and visible * alpha."""
    points = [(*hosts_terms(r), r["step_s"] - r["compute_alone_s"] - r.get("codec_s", 0.0))
              for r in runs]
    visible, visible_alpha = least_squares_2(points)
    if visible_alpha < 0 or visible <= 0:
        # An exchange cannot cost less than nothing: the best fit with alpha = 0.
        return (sum(x * t for x, _, t in points) / sum(x * x for x, _, _ in points)), 0.0
    return visible, visible_alpha / visible


def predict_hosts(r, visible, alpha):
    x, y = hosts_terms(r)
    return r["compute_alone_s"] + r.get("codec_s", 0.0) + visible * (x + y * alpha)


def hosts_report(paths, held_out_ranks):
    """Fits on the runs with fewer ranks than `held_out_ranks`, prints the error on every run,
    those held out marked."""
    runs = load_hosts(paths)
    train = [r for r in runs if r["ranks"] < held_out_ranks]
    test = [r for r in runs if r["ranks"] >= held_out_ranks]
    if len(train) < 2:
        sys.exit(f"scaleout.py: fewer than 2 hosts-mode runs below {held_out_ranks} ranks to fit on")
    visible, alpha = fit_hosts(train)
    print(f"Fitted on {len(train)} hosts-mode runs of fewer than {held_out_ranks} ranks: visible "
          f"fraction of the link time {visible:.2f}, {alpha * 1e3:.2f} ms per exchange; checked "
          f"on {len(test)} runs of {held_out_ranks} ranks or more that the fit did not see.\n")
    print("| ranks | link Mbit/s | method | buckets | bytes/step | exchanges | measured s | "
          "predicted s | error | held out |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---|")
    held = []
    for r in sorted(runs, key=lambda r: (r["ranks"], r["method"], r.get("extra", ""))):
        predicted = predict_hosts(r, visible, alpha)
        err = (predicted - r["step_s"]) / r["step_s"]
        if r in test:
            held.append(abs(err))
        buckets = "wire 4/8 kB" if "0.004" in r.get("extra", "") else "one"
        print(f"| {r['ranks']} | {r['link_mbit']:.1f} | {r['method']} | {buckets} | "
              f"{r['bytes_per_step']:,.0f} | {r['exchanges']:.0f} | {r['step_s']:.3f} | "
              f"{predicted:.3f} | {100 * err:+.0f}% | {'yes' if r in test else ''} |")
    if held:
        print(f"\nHeld-out runs: mean absolute error {100 * sum(held) / len(held):.1f}%, largest "
              f"{100 * max(held):.0f}%.\n")
    return visible, alpha


def project(visible, latency, tflops, hbm, ranks, rates):
    out = {}
    for model, spec in MODELS.items():
        compute = spec["batch"] * spec["flops"] / (tflops * 1e12)
        for rate in rates:
            for method in METHODS:
                for p in ranks:
                    nbytes, messages = wire(method, spec, p)
                    codec = METHODS[method]["passes"] * 2 * 4 * spec["params"] / (hbm * 1e9)
                    if method == "dense":
                        codec = 0.0
                    # Buckets are cut by the bytes they send (Compressor::wire_bytes_per_value).
                    m = METHODS[method]
                    density = spec["psgd4"] if method.startswith("powersgd") else m["density"]
                    buckets = max(1, math.ceil(spec["params"] * density * m["bytes"] / 25e6))
                    comm = nbytes * 8 / rate + messages * buckets * latency
                    step = compute + codec + visible * comm
                    out[(model, rate, method, p)] = {
                        "samples_per_s": p * spec["batch"] / step,
                        "efficiency": compute / step, "step_s": step}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?",
                    help="bench/run_testbed.sh's results.jsonl (shared-link runs) to fit on")
    ap.add_argument("--hosts", nargs="+", metavar="RUNS.jsonl",
                    help="hosts-mode step runs (bench/testbed_bench.py, every rank its own link) to "
                         "fit on instead, those of --held-out-ranks and more kept out of the fit")
    ap.add_argument("--held-out-ranks", type=int, default=8)
    ap.add_argument("--bytes", metavar="BYTES.jsonl",
                    help="bench/run_coded_bytes.sh's runs: fit the Rice-coded sums' bits on "
                         "--bytes-fit-ranks and check them on the other rank counts, then stop")
    ap.add_argument("--bytes-fit-ranks", default="2,4,8")
    ap.add_argument("--visible", type=float,
                    help="project with this fraction of the link time visible in the step instead "
                         "of fitting one (the fit on 2 and 4 ranks of 2026-12-06 gave 1.05)")
    ap.add_argument("--plots")
    ap.add_argument("--tflops", type=float, default=40.0)
    ap.add_argument("--hbm-gbs", type=float, default=2000.0)
    ap.add_argument("--latency-us", type=float, default=25.0)
    args = ap.parse_args()
    if args.bytes:
        return bytes_report(args.bytes, {int(p) for p in args.bytes_fit_ranks.split(",")})
    if args.visible is not None:
        return projection(args.visible, args)
    if args.hosts:
        visible, _ = hosts_report(args.hosts, args.held_out_ranks)
        return projection(visible, args)
    if not args.results:
        ap.error("give a results.jsonl or --hosts RUNS.jsonl ...")
    results = report_testbed.load(args.results)  # the latest of each run
    visible, alpha, errors = fit(results)
    print(f"Calibration on {len(errors)} measured runs: visible fraction of communication "
          f"{visible:.2f} (hidden {1 - visible:.2f}), overhead per ring message on the testbed "
          f"{alpha * 1e3:.2f} ms (it absorbs per-collective costs the byte count misses, such as "
          "PowerSGD's second all-reduce; it is not a network latency)\n")
    print("| model | ranks | rate | method | measured s/step | predicted | error |")
    print("|---|---:|---|---|---:|---:|---:|")
    for r, predicted, err in errors:
        print(f"| {r['model']} | {r['ranks']} | {r['rate']} | {r['method']} | {r['step_s']:.3f} | "
              f"{predicted:.3f} | {100 * err:+.0f}% |")
    mean_abs = sum(abs(e) for _, _, e in errors) / max(len(errors), 1)
    print(f"\nMean absolute error {100 * mean_abs:.1f}%, largest "
          f"{100 * max((abs(e) for _, _, e in errors), default=0):.0f}%.\n")
    projection(visible, args)


def projection(visible, args):
    """Prints the projected efficiencies and crossovers (and plots them with --plots)."""
    ranks = [8, 16, 32, 64, 128, 256, 512, 1024]
    rates = [1e9, 1e10, 1e11]
    proj = project(visible, args.latency_us * 1e-6, args.tflops, args.hbm_gbs, ranks, rates)
    print("pactrain's ternary sums, bytes per value per ring message (fields / coded, the "
          "default): " + ", ".join(f"P = {p}: {ternary_bytes(p, 'fields'):.2f} / "
                                   f"{ternary_bytes(p):.2f}" for p in ranks) + "\n")
    print(f"Projection (assumed: {args.tflops:.0f} TFLOP/s sustained per rank, codec memory-bound "
          f"at {args.hbm_gbs:.0f} GB/s, {args.latency_us:.0f} us per message, 25 MB buckets, the "
          f"fitted overlap). Scaling efficiency at "
          "P = 8 / 64 / 1024, and where each method stops paying off:\n")
    print("| model | link | method | eff. P=8 | P=64 | P=1024 | below dense from P | "
          "below 50% efficiency from P |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for model in MODELS:
        for rate in rates:
            for method in METHODS:
                eff = [proj[(model, rate, method, p)]["efficiency"] for p in ranks]
                worse = next((p for p in ranks if proj[(model, rate, method, p)]["samples_per_s"]
                              < proj[(model, rate, "dense", p)]["samples_per_s"]), None)
                half = next((p for p, e in zip(ranks, eff) if e < 0.5), None)
                print(f"| {model} | {rate / 1e9:.0f} Gbit/s | {method} | {eff[0]:.2f} | "
                      f"{eff[3]:.2f} | {eff[-1]:.2f} | {worse or '-'} | {half or '-'} |")
    ours = "pactrain80-ternary"
    print(f"\nWhere {ours} overtakes each method (the smallest P of {ranks[0]}-{ranks[-1]} from "
          "which its projected step stays shorter; '-' not by the largest, 'all' from the "
          "first):\n")
    others = [m for m in METHODS if m != ours and not m.startswith("pactrain")]
    print("| model | link | " + " | ".join(others) + " |")
    print("|---|---|" + "---:|" * len(others))
    for model in MODELS:
        for rate in rates:
            cells = []
            for other in others:
                ahead = {p for p in ranks
                         if proj[(model, rate, ours, p)]["step_s"] < proj[(model, rate, other, p)]["step_s"]}
                # The smallest P from which it stays ahead up to the largest.
                start = next((p for p in ranks if all(q in ahead for q in ranks if q >= p)), None)
                cells.append("-" if start is None else "all" if start == ranks[0] else str(start))
            print(f"| {model} | {rate / 1e9:.0f} Gbit/s | " + " | ".join(cells) + " |")
    print()
    if args.plots:
        try:
            import matplotlib
        except ImportError:
            sys.exit("plots need matplotlib: apt-get install python3-matplotlib (or leave out --plots "
                     "for the tables alone)")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        os.makedirs(args.plots, exist_ok=True)
        fig, axes = plt.subplots(len(MODELS), len(rates), figsize=(12, 9), sharex=True,
                                 sharey=True)
        for i, model in enumerate(MODELS):
            for j, rate in enumerate(rates):
                ax = axes[i][j]
                for method in METHODS:
                    ax.plot(ranks, [proj[(model, rate, method, p)]["efficiency"] for p in ranks],
                            marker=".", linewidth=2.5 if method == "pactrain80-ternary" else 1,
                            label=method)
                ax.axhline(0.5, color="grey", linestyle=":")
                ax.set_xscale("log", base=2)
                ax.set_title(f"{model}, {rate / 1e9:.0f} Gbit/s", fontsize=9)
                if j == 0:
                    ax.set_ylabel("scaling efficiency")
                if i == len(MODELS) - 1:
                    ax.set_xlabel("ranks P")
        axes[0][0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(args.plots, "scaleout.png"), dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    main()
