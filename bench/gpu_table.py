"""Prints the GPU check's table from gpu_bench.jsonl (scripts/gpu_check.sh): per model and
precision (fp32, TF32, and PyTorch's autocast in bf16 and fp16), pactrain's and PyTorch's median
step time, their ratio (the target is at most 1.1), the TFLOP/s each achieves against the
measured GEMM peak, and each one's peak GPU memory; "-" where a run failed or was not made.

FLOPs per step: 3x the forward pass (backward costs about twice forward), with forward 2 x 4.09
GMAC per 224x224 image for ResNet-50, 2 x 17.56 GMAC for ViT-B/16, and for GPT-2 small per
sequence of 1024 tokens 2 x 124.4 M multiply-adds a token plus attention's 2 x 2 x 12 layers x
1024 x 768 (scores and weighted sum, computed in full); the TFLOP/s columns hold for 224x224
images and 1024 tokens only (the GPU check's). A second table puts each pruned step (bench-gpu-step
--sparsity) beside the dense one of the same model and precision, and a third puts pactrain's GEMM
(bench-gpu-step --models gemm) beside the peak PyTorch measured on the same square shape."""
import json
import sys

FORWARD_FLOPS = {"resnet50": 2 * 4.09e9, "vit-base": 2 * 17.56e9,
                 "gpt2-small": 1024 * (2 * 124.4e6 + 4 * 12 * 1024 * 768)}


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gpu_table.py gpu_bench.jsonl")
    rows, peak, gemm = {}, {}, {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r["framework"] == "peak":
                peak[r["precision"]] = r["tflops"]
            elif r.get("model") == "gemm":
                gemm[r["precision"]] = r
            else:
                rows[(r["model"], r["precision"], r["framework"], r.get("sparsity", 0.0))] = r
    print("| model | batch | precision | pactrain ms | PyTorch ms | ratio | pactrain TFLOP/s "
          "| PyTorch TFLOP/s | GEMM peak TFLOP/s | pactrain / PyTorch peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in ("resnet50", "vit-base", "gpt2-small"):
        for precision in ("fp32", "tf32", "bf16", "fp16"):
            ours = rows.get((model, precision, "pactrain", 0.0))
            theirs = rows.get((model, precision, "pytorch", 0.0))
            if not ours and not theirs:
                continue
            batch = (ours or theirs)["batch"]
            flops = 3 * FORWARD_FLOPS[model] * batch

            def ms(r):  # no line: the run failed, or (pactrain's bf16 and fp16) was not made
                return f"{r['median_ms']:.1f}" if r else "-"

            def tflops(r):
                return f"{flops / (r['median_ms'] * 1e-3) / 1e12:.1f}" if r else "-"

            def gib(r):
                if not r or not r.get("peak_gpu_bytes"):
                    return "-"
                return f"{r['peak_gpu_bytes'] / 2**30:.1f}"

            ratio = f"{ours['median_ms'] / theirs['median_ms']:.2f}x" if ours and theirs else "-"
            print(f"| {model} | {batch} | {precision} | {ms(ours)} | {ms(theirs)} | {ratio} | "
                  f"{tflops(ours)} | {tflops(theirs)} | {peak.get(precision, '-')} | "
                  f"{gib(ours)} / {gib(theirs)} |")
    if gemm:
        print()
        print("| GEMM (square) | precision | pactrain TFLOP/s | PyTorch peak TFLOP/s | pactrain / peak |")
        print("|---|---|---:|---:|---:|")
    for precision, r in sorted(gemm.items()):
        top = peak.get(precision)
        share = f"{r['tflops'] / top:.0%}" if top else "-"
        print(f"| {r['size']}^3 | {precision} | {r['tflops']:.1f} | {top or '-'} | {share} |")
    pruned = sorted(k for k in rows if k[2] == "pactrain" and k[3] > 0)
    if pruned:
        print()
        print("| model | precision | sparsity | pruned ms | dense ms | pruned / dense |")
        print("|---|---|---:|---:|---:|---:|")
    for model, precision, _, sparsity in pruned:
        ours, dense = rows[(model, precision, "pactrain", sparsity)], \
            rows.get((model, precision, "pactrain", 0.0))
        ratio = f"{ours['median_ms'] / dense['median_ms']:.2f}x" if dense else "-"
        print(f"| {model} | {precision} | {sparsity:.0%} | {ours['median_ms']:.1f} | "
              f"{dense['median_ms']:.1f} | {ratio} |" if dense else
              f"| {model} | {precision} | {sparsity:.0%} | {ours['median_ms']:.1f} | - | - |")


if __name__ == "__main__":
    main()
