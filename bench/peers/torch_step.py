#!/usr/bin/python3
"""The PyTorch side of bench/run_step.sh: one training step (forward, backward, SGD with momentum)
of the same models on random 28x28 data, printed as "name seconds_per_step".
Usage: torch_step.py [--threads N] [--steps S] [--batch B] [--models a,b,c]"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.vision_transformer import VisionTransformer



class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class CifarResNet(nn.Module):
    def __init__(self, depth, cin, classes):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, width = [], 16
        for stage, w in enumerate((16, 32, 64)):
            for b in range(n):
                blocks.append(Block(width, w, 2 if (b == 0 and stage > 0) else 1))
                width = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        h = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def make(name):
    if name == "resnet20":
        return CifarResNet(20, 1, 10), 1
    if name == "resnet18":  # the small-input stem, as pactrain's --small-input
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        return m, 1
    if name == "vit":
        return VisionTransformer(28, 4, 6, 8, 256, 1024, num_classes=10), 3
    raise SystemExit(f"unknown model {name}")


def make_step(model, channels, batch, wrap_optimizer=lambda opt: opt):
    """One SGD-with-momentum training step of `model` on a fixed random batch; wrap_optimizer
    may wrap the SGD (PostLocalSGDOptimizer)."""
    opt = wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    x = torch.randn(batch, channels, 28, 28)
    y = torch.arange(batch) % 10

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--models", default="resnet20,resnet18,vit")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name in args.models.split(","):
        model, channels = make(name)
        step = make_step(model, channels, args.batch)
        step()
        step()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        print(f"{name} {(time.perf_counter() - t0) / args.steps:.5f}", flush=True)


if __name__ == "__main__":
    main()
