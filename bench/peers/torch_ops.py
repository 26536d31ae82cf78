#!/usr/bin/python3
"""The PyTorch side of bench/run_ops.sh: the same GEMM and conv2d cases as bench-ops, printed in
the same "name seconds gflops" format. Usage: torch_ops.py [--threads N] [--repeat R]"""
import argparse
import time

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--repeat", type=int, default=5)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


def best_seconds(fn):
    fn()
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


for n in (256, 512, 1024):
    a, b = torch.randn(n, n), torch.randn(n, n)
    s = best_seconds(lambda: a @ b)
    print(f"sgemm_{n} {s:.6f} {2.0 * n ** 3 / s * 1e-9:.2f}")

cases = [
    ("conv_b32_c64_28_k3", 32, 64, 28, 64, 3, 1, 1),
    ("conv_b32_c128_14_k3", 32, 128, 14, 128, 3, 1, 1),
    ("conv_b32_c64_28_k3_s2", 32, 64, 28, 128, 3, 2, 1),
    ("conv_b32_c64_28_k1", 32, 64, 28, 256, 1, 1, 0),
]
for name, n, c, h, oc, k, stride, pad in cases:
    x = torch.randn(n, c, h, h, requires_grad=True)
    w = (torch.randn(oc, c, k, k) * 0.05).requires_grad_()
    oh = (h + 2 * pad - k) // stride + 1
    flops = 2.0 * n * oc * oh * oh * c * k * k
    with torch.no_grad():
        fwd = best_seconds(lambda: F.conv2d(x, w, None, stride, pad))
    gy = torch.randn(n, oc, oh, oh)

    def step():
        x.grad = None
        w.grad = None
        F.conv2d(x, w, None, stride, pad).backward(gy)

    both = best_seconds(step)
    print(f"{name}_fwd {fwd:.6f} {flops / fwd * 1e-9:.2f}")
    print(f"{name}_fwdbwd {both:.6f} {3 * flops / both * 1e-9:.2f}")
