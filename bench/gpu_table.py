"""Prints the GPU check's table from gpu_bench.jsonl (scripts/gpu_check.sh): per model and
precision, pactrain's and PyTorch's median step time, their ratio (the target is at most 1.1),
and the TFLOP/s each achieves against the measured GEMM peak.

FLOPs per step: 3x the forward pass (backward costs about twice forward), with forward 2 x 4.09
GMAC per 224x224 image for ResNet-50 and 2 x 17.56 GMAC for ViT-B/16; the TFLOP/s columns hold
for 224x224 runs only (the GPU check's)."""
import json
import sys

FORWARD_FLOPS = {"resnet50": 2 * 4.09e9, "vit-base": 2 * 17.56e9}


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gpu_table.py gpu_bench.jsonl")
    rows, peak = {}, {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r["framework"] == "peak":
                peak[r["precision"]] = r["tflops"]
            else:
                rows[(r["model"], r["precision"], r["framework"])] = r
    print("| model | batch | precision | pactrain ms | PyTorch ms | ratio | pactrain TFLOP/s "
          "| PyTorch TFLOP/s | GEMM peak TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in ("resnet50", "vit-base"):
        for precision in ("fp32", "tf32"):
            ours = rows.get((model, precision, "pactrain"))
            theirs = rows.get((model, precision, "pytorch"))
            if not ours and not theirs:
                continue
            batch = (ours or theirs)["batch"]
            flops = 3 * FORWARD_FLOPS[model] * batch

            def ms(r):
                return f"{r['median_ms']:.1f}" if r else "failed"

            def tflops(r):
                return f"{flops / (r['median_ms'] * 1e-3) / 1e12:.1f}" if r else "-"

            ratio = f"{ours['median_ms'] / theirs['median_ms']:.2f}x" if ours and theirs else "-"
            print(f"| {model} | {batch} | {precision} | {ms(ours)} | {ms(theirs)} | {ratio} | "
                  f"{tflops(ours)} | {tflops(theirs)} | {peak.get(precision, '-')} |")


if __name__ == "__main__":
    main()
