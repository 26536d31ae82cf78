#!/usr/bin/python3
"""Tables and plots from the head-to-head's results (bench/run_testbed.sh).
Usage: report_testbed.py RESULTS.jsonl [--plots DIR]
Prints Markdown: per model and rate, every run's samples/s, the step-time split, bytes per step,
and its ratio to our dense and to the best PyTorch peer; then the headline checks for pactrain at
80% with ternary coding. With --plots, draws throughput against bandwidth and bytes per step."""
import argparse
import collections
import json
import os
import sys

RATE_MBIT = {"100mbit": 100, "500mbit": 500, "1gbit": 1000, "10gbit": 10000}


def load(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    latest = {}
    for r in runs:  # a rerun replaces the earlier result of the same run
        r.setdefault("mode", "shared")  # what every run was before hosts mode existed
        latest[(r["model"], r["rate"], r["method"], r["ranks"], r["mode"])] = r
    return list(latest.values())


def table(runs, model, rate, compute_only):
    rows = [r for r in runs if r["model"] == model and r["rate"] == rate]
    if not rows:
        return []
    dense = next((r["samples_per_s"] for r in rows if r["method"] == "dense"), None)
    peers = [r["samples_per_s"] for r in rows if r["impl"] == "pytorch"]
    best_peer = max(peers) if peers else None
    link = rows[0].get("link_mbit")
    steps = "/".join(str(n) for n in sorted({r["steps"] for r in rows if "steps" in r}))
    commits = ", ".join(sorted({r["commit"] for r in rows}))
    dates = ", ".join(sorted({r["date"] for r in rows}))
    modes = "/".join(sorted({r["mode"] for r in rows}))
    out = [f"**{model}, {rate}** ({modes} mode, calibrated link {link:.0f} Mbit/s; {rows[0]['ranks']} ranks, "
           f"batch {rows[0]['batch']} per rank{'; timed steps per run ' + steps if steps else ''}; "
           f"{dates}, commit {commits})", "",
           "| method | samples/s | step s | compute / codec / exposed comm s | bytes/step | vs our dense | vs best PyTorch |",
           "|---|---:|---:|---|---:|---:|---:|"]
    if compute_only:
        out.append(f"| compute only (no communication) | {compute_only:.1f} | | | 0 | "
                   f"{compute_only / dense:.2f}x | {compute_only / best_peer:.2f}x |"
                   if dense and best_peer else f"| compute only | {compute_only:.1f} | | | 0 | | |")
    for r in sorted(rows, key=lambda r: (r["impl"] != "pactrain", -r["samples_per_s"])):
        split = (f"{r['compute_s']:.3f} / {r['codec_s']:.3f} / {r['comm_exposed_s']:.3f}"
                 if "compute_s" in r else "(not reported)")
        nbytes = f"{r['bytes_per_step']:,.0f}" if "bytes_per_step" in r else ""
        out.append(f"| {r['method']} | {r['samples_per_s']:.1f} | {r['step_s']:.3f} | {split} | "
                   f"{nbytes} | {r['samples_per_s'] / dense:.2f}x | "
                   f"{r['samples_per_s'] / best_peer:.2f}x |" if dense and best_peer else
                   f"| {r['method']} | {r['samples_per_s']:.1f} | {r['step_s']:.3f} | {split} | {nbytes} | | |")
    return out + [""]


def headline(runs, model, rate, compute_only):
    rows = {r["method"]: r["samples_per_s"] for r in runs
            if r["model"] == model and r["rate"] == rate}
    ours = rows.get("pactrain80-ternary")
    if not ours:
        return []
    lines = []
    if runs[0]["ranks"] != 2:
        model = f"{model} ({runs[0]['ranks']} ranks)"
    compressors = {m: rows[m] for m in ("fp16", "topk", "terngrad", "torch-fp16") if m in rows}
    if compressors:
        best = max(compressors, key=compressors.get)
        ratio = ours / compressors[best]
        lines.append(f"- {model} {rate}: pactrain 80% ternary / best of fp16, topk, terngrad, "
                     f"torch-fp16 ({best}) = **{ratio:.2f}x** (target 1.25x: "
                     f"{'met' if ratio >= 1.25 else 'not met'})")
    psgd = {m: rows[m] for m in ("powersgd2", "powersgd4", "torch-powersgd2", "torch-powersgd4")
            if m in rows}
    if psgd:
        best = max(psgd, key=psgd.get)
        ratio = ours / psgd[best]
        lines.append(f"- {model} {rate}: pactrain 80% ternary / best PowerSGD ({best}) = "
                     f"**{ratio:.2f}x** (target 1.0x: {'met' if ratio >= 1.0 else 'not met'})")
    if compute_only:
        ratio = ours / compute_only
        lines.append(f"- {model} {rate}: pactrain 80% ternary / compute only = **{ratio:.2f}x** "
                     f"(target at least 0.85x: {'met' if ratio >= 0.85 else 'not met'})")
    return lines


def plots(runs, folder, suffix):
    try:
        import matplotlib
    except ImportError:
        sys.exit("plots need matplotlib: apt-get install python3-matplotlib (or leave out --plots "
                 "for the tables alone)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    ranks = runs[0]["ranks"]
    for model in sorted({r["model"] for r in runs}):
        series = collections.defaultdict(list)
        for r in runs:
            if r["model"] == model and r["rate"] in RATE_MBIT and r["method"] != "compute-only":
                series[r["method"]].append((RATE_MBIT[r["rate"]], r["samples_per_s"]))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for method, points in sorted(series.items()):
            points.sort()
            style = "-" if not method.startswith("torch") else "--"
            width = 2.5 if method == "pactrain80-ternary" else 1.2
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o",
                    linewidth=width, label=method)
        compute = [r["samples_per_s"] for r in runs
                   if r["model"] == model and r["method"] == "compute-only"]
        if compute:
            ax.axhline(compute[0], color="black", linestyle=":", label="compute only")
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Mbit/s, shared by the ranks)")
        ax.set_ylabel("samples/s (all ranks)")
        ax.set_title(f"{model}, {ranks} ranks: throughput against bandwidth")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"throughput-{model}{suffix}.png"), dpi=110)
        plt.close(fig)

        rows = sorted({(r["method"], r["bytes_per_step"]) for r in runs
                       if r["model"] == model and r.get("bytes_per_step")
                       and r["rate"] == "1gbit"}, key=lambda t: -t[1])
        if rows:
            fig, ax = plt.subplots(figsize=(7, 4))
            ax.barh([m for m, _ in rows], [b / 1e6 for _, b in rows])
            ax.set_xscale("log")
            ax.set_xlabel("MB sent per step per rank (log scale)")
            ax.set_title(f"{model}, {ranks} ranks: bytes per step")
            fig.tight_layout()
            fig.savefig(os.path.join(folder, f"bytes-{model}{suffix}.png"), dpi=110)
            plt.close(fig)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--plots")
    args = p.parse_args()
    every_run = load(args.results)
    for ranks in sorted({r["ranks"] for r in every_run}):
        runs = [r for r in every_run if r["ranks"] == ranks]
        compute = {r["model"]: r["samples_per_s"] for r in runs if r["method"] == "compute-only"}
        lines, checks = [], []
        for model in sorted({r["model"] for r in runs}):
            for rate in sorted({r["rate"] for r in runs}, key=lambda x: RATE_MBIT.get(x, 1e9)):
                lines += table([r for r in runs if r["method"] != "compute-only"], model, rate,
                               compute.get(model))
                checks += headline(runs, model, rate, compute.get(model))
        print("\n".join(lines))
        if checks:
            print(f"Headline checks, {ranks} ranks:\n")
            print("\n".join(checks) + "\n")
        if args.plots:
            plots(runs, args.plots, "" if ranks == 2 else f"-{ranks}ranks")


if __name__ == "__main__":
    main()
