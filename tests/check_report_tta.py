#!/usr/bin/env python3
"""bench/report_tta.py's arithmetic on a made-up case: a pruned run's early epochs are charged
their extra bytes at the link's rate, rates in kbit are read, and a run trained end to end on the
link (NAME-at-RATE) lends its curve where NAME has none, and a run pruned once at the first step
(-initCRIT) times as the pruned run.
Usage: check_report_tta.py REPO"""
import json
import os
import subprocess
import sys
import tempfile

repo = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    curves = os.path.join(d, "curves")
    os.mkdir(curves)

    def write_curve(name, epochs):
        with open(os.path.join(curves, name + ".jsonl"), "w") as f:
            for i, (acc, sent) in enumerate(epochs):
                f.write(json.dumps({"kind": "epoch", "epoch": i, "test_acc": acc,
                                    "bytes_per_step": sent}) + "\n")

    # pactrain: 92.5% in its second epoch; its first sends 25,000 bytes a step more than the last.
    write_curve("t80-ranks8", [(0.90, 26000), (0.93, 1000)])
    # Pruned once at the first step: the final bytes from the start, 92.5% in its first epoch.
    write_curve("t80-initsnip-ranks8", [(0.925, 1000)])
    # EF-signSGD: only a run on the link, at 92.6% after one epoch.
    write_curve("signsgd-ranks8-at-2500kbit", [(0.926, 500)])
    steps = os.path.join(d, "steps.jsonl")
    with open(steps, "w") as f:
        for method, step_s in (("pactrain80-ternary", 0.5), ("signsgd", 2.0)):
            f.write(json.dumps({"model": "resnet20", "ranks": 8, "rate": "2500kbit",
                                "method": method, "step_s": step_s, "link_mbit": 2.0,
                                "mode": "hosts"}) + "\n")
    out = subprocess.run([sys.executable, os.path.join(repo, "bench", "report_tta.py"), "--curves",
                          curves, "--steps", steps, "--ranks", "8", "--steps-per-epoch", "100"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"report_tta failed:\n{out.stderr}")
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")][1:]
    # pactrain: 100 x (0.5 + 25,000 x 8 / 2e6) = 60 s, then 100 x 0.5: 92.5% at 110 s, second.
    # EF-signSGD: 100 x 2.0 = 200 s.
    # The one-shot run times as pactrain: 100 x 0.5 = 50 s.
    expected = ["| pactrain 80% ternary, pruned by snip at the first step | 0.500 | 1,000 | 1 | 50 | 92.50% | 50 |",
                "| pactrain 80% ternary | 0.500 | 1,000 | 2 | 110 | 93.00% | 110 |",
                "| signsgd (the curve of its run at 2500kbit) | 2.000 | 500 | 1 | 200 | 92.60% | 200 |"]
    if rows != expected:
        sys.exit("report_tta: expected\n  " + "\n  ".join(expected) + "\ngot\n  " +
                 "\n  ".join(rows))
print("report_tta: 3 rows as expected")
