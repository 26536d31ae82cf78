"""PyTorch eager peer of bench-gpu-step: the same training step (forward, backward, SGD with
momentum) of torchvision's ResNet-50 (batch 64) and ViT-B/16 (batch 32) on synthetic 224x224
data, and of GPT-2 small (gpt2-small: bench/peers/torch_gpt.py's model, the same architecture as
pactrain's, with 50257 tokens of vocabulary, context --context, batch 8) on random tokens, timed
with CUDA events, median of --steps after --warmup. Prints one JSON line per model.

--tf32 lets matrix products and convolutions use TF32 (torch.backends...allow_tf32); without it
both are plain fp32, as pactrain's default. --amp bf16 or fp16 runs forward and the loss under
torch.autocast in that precision, as PyTorch users train: fp16 with a GradScaler, bf16 without
(the peer of pactrain's --precision). Each line carries the step's peak GPU memory. --device cpu with a small --image-size and --batch
checks the script on a machine without a GPU (host clock instead of CUDA events).
"""
import argparse
import json
import time

import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))


def measure_peak(n=8192, repeats=10):
    """The GPU's measured matrix-product peak: n x n x n products through cuBLAS, best of
    `repeats`, in fp32, TF32, bf16 and fp16 (the ceilings a training step is compared with)."""
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
              "fp16": torch.float16}
    for precision, dtype in dtypes.items():
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.matmul(a, b)
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end))
        print(json.dumps({"framework": "peak", "precision": precision,
                          "tflops": round(2 * n ** 3 / (best * 1e-3) / 1e12, 1)}), flush=True)


def time_steps(step, steps, device):
    """Milliseconds of each step: CUDA events between the steps on a GPU, the host clock else."""
    if device == "cpu":
        out = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            out.append((time.perf_counter() - start) * 1e3)
        return out
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    torch.cuda.profiler.start()  # only the timed steps, under `ncu --profile-from-start off`
    events[0].record()
    for s in range(steps):
        step()
        events[s + 1].record()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return [events[s].elapsed_time(events[s + 1]) for s in range(steps)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet50,vit-base")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--amp", choices=["bf16", "fp16"],
                        help="torch.autocast in this precision (fp16 with a GradScaler)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--context", type=int, default=1024, help="gpt2-small's tokens")
    parser.add_argument("--batch", type=int, default=0,
                        help="0: 64 for ResNet-50, 32 for ViT, 8 for gpt2-small")
    parser.add_argument("--peak", action="store_true",
                        help="measure the GPU's fp32 and TF32 GEMM peak instead")
    args = parser.parse_args()
    if args.peak:
        measure_peak()
        return
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True  # pactrain also times cuDNN's algorithms per shape
    device = torch.device(args.device)
    for name in args.models.split(","):
        torch.manual_seed(0)
        if name == "resnet50":
            model, batch = torchvision.models.resnet50(), 64
        elif name == "vit-base":
            model = torchvision.models.vit_b_16(image_size=args.image_size)
            batch = 32
        elif name == "gpt2-small":
            import torch_gpt
            model, batch = torch_gpt.GPT(50257, args.context, 768, 12, 12), 8
        else:
            raise SystemExit(f"unknown model {name}; expected resnet50, vit-base or gpt2-small")
        batch = args.batch or batch
        model = model.to(device).train()
        sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
        # Disabled, the scaler passes the loss and the step through unchanged.
        scaler = torch.cuda.amp.GradScaler(enabled=args.amp == "fp16")
        if name == "gpt2-small":
            tokens = torch.randint(0, 50257, (batch, args.context + 1), device=device)
            x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)
        else:
            x = torch.randn(batch, 3, args.image_size, args.image_size, device=device)
            y = torch.arange(batch, device=device) % 1000

        def step():
            with torch.autocast(device_type=args.device, dtype=amp, enabled=amp is not None):
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
            sgd.zero_grad(set_to_none=False)
            scaler.scale(loss).backward()
            scaler.step(sgd)
            scaler.update()

        for _ in range(args.warmup):
            step()
        ms = sorted(time_steps(step, args.steps, args.device))
        print(json.dumps({"framework": "pytorch", "model": name, "batch": batch,
                          "precision": args.amp or ("tf32" if args.tf32 else "fp32"),
                          "median_ms": round(ms[len(ms) // 2], 3), "min_ms": round(ms[0], 3),
                          "steps": args.steps,
                          "peak_gpu_bytes": torch.cuda.max_memory_allocated()
                          if args.device == "cuda" else 0}), flush=True)
        del model, sgd
        if args.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
