#!/usr/bin/python3
"""The PyTorch peer of the time-to-accuracy runs (bench/run_accuracy.sh torch-fp16 ...): ResNet-20
on Fashion-MNIST trained with DistributedDataParallel over gloo, N processes on this machine, with
the recipe of docs/results.md: SGD with Nesterov momentum 0.9, weight decay 5e-4, one-cycle
learning rate peaking at --lr, --batch per rank, random crop (padding 4) and horizontal flip, the
whole test set evaluated after every epoch. --hook picks DDP's gradient communication as in
torch_ddp.py: allreduce (dense fp32), fp16 (fp16_compress_hook), powersgd2 / powersgd4
(powerSGD_hook, error feedback and warm start as PyTorch's defaults, dense for the first 2 steps).
Each rank takes every P-th image of a shuffled epoch (the shuffle seeded by --seed and the
epoch). Writes the metrics file pactrain's trainer writes (one JSON object per line: "step"
records every 50 steps with loss and bytes_sent, the bytes the hook puts on the wire per rank and
step from the hook's formula for a ring all-reduce, not measured; "epoch" records with test_acc
and wall_s), so bench/report_tta.py reads both.
--sync local:H is PyTorch's post-local SGD (post_localSGD_hook with one-rank subgroups, so
local steps communicate nothing, and PostLocalSGDOptimizer with a PeriodicModelAverager of period
H after --sync-warmup steps); --sync diloco:H is DiLoCo written out (no DDP: every H steps the
pseudo-gradient anchor - local is averaged with one all-reduce per tensor and an outer SGD with
Nesterov momentum, --outer-lr and --outer-momentum, steps from the anchor; buffers averaged), as
pactrain's --sync diloco:H, which also re-estimates the batch-norm statistics on 20 training
batches before each evaluation (torch.optim.swa_utils.update_bn; the same batches on every
rank), as pactrain's trainer does for DiLoCo.
Usage: torch_train.py --metrics FILE [--ranks 2] [--epochs 15] [--batch 64] [--lr 0.1]
                      [--hook allreduce|fp16|powersgd2|powersgd4] [--seed 1] [--max-steps N]
                      [--sync step|local:H|diloco:H] [--sync-warmup N] [--outer-lr 0.7]
                      [--outer-momentum 0.9] [--data-dir /usr/share/datasets/fashion-mnist]"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ddp  # noqa: E402  (gloo, DDP and its hooks)
import torch_step  # noqa: E402  (the model)

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's, as pactrain's loader


def read_idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder, split):
    def find(stem):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
        sys.exit(f"torch_train: no {stem} or {stem}.gz in {folder} (set --data-dir)")
    images = read_idx(find(f"{split}-images-idx3-ubyte"))
    labels = read_idx(find(f"{split}-labels-idx1-ubyte"))
    x = (torch.from_numpy(images.astype(np.float32) / 255.0) - MEAN) / STD
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def augment(x, generator):
    """Random crop with padding 4 and horizontal flip, per image."""
    n = x.shape[0]
    padded = F.pad(x, (4, 4, 4, 4))
    dx = torch.randint(0, 9, (n,), generator=generator)
    dy = torch.randint(0, 9, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def wire_bytes(model, hook, ranks):
    """What one rank sends per step: a ring all-reduce sends 2 (P - 1) / P of the payload."""
    ring = 2.0 * (ranks - 1) / ranks
    params = [p for p in model.parameters() if p.requires_grad]
    if hook == "allreduce":
        return ring * 4 * sum(p.numel() for p in params)
    if hook == "fp16":
        return ring * 2 * sum(p.numel() for p in params)
    rank = int(hook[len("powersgd"):])
    total = 0  # PowerSGD: P and Q of each matrix, 1-D tensors uncompressed
    for p in params:
        if p.dim() <= 1:
            total += p.numel()
        else:
            rows, cols = p.shape[0], p.numel() // p.shape[0]
            total += rank * (rows + cols) if rank * (rows + cols) < rows * cols else rows * cols
    return ring * 4 * total


def worker(rank, args):
    torch_ddp.start_gloo(rank, args.ranks, 29519)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model, _ = torch_step.make("resnet20")
    kind, every = (args.sync.split(":") + ["1"])[:2]
    every = int(every)
    # diloco: local steps only; the synchronisation below is the communication.
    ddp = model if kind == "diloco" else torch_ddp.wrap(model, args.hook)
    if kind == "local":
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as local_sgd
        # A one-rank group per rank (new_subgroups needs CUDA in PyTorch 1.13): every rank creates
        # every group, and keeps its own.
        alone = [dist.new_group([r]) for r in range(args.ranks)][rank]
        ddp.register_comm_hook(local_sgd.PostLocalSGDState(None, alone, args.sync_warmup),
                               local_sgd.post_localSGD_hook)
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    steps_per_epoch = len(train_x) // (args.batch * args.ranks)
    total = args.epochs * steps_per_epoch
    if args.max_steps:
        total = min(total, args.max_steps)
    inner = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                            weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(inner, max_lr=args.lr, total_steps=total)
    opt = inner
    if kind == "local":
        from torch.distributed.algorithms.model_averaging import averagers
        from torch.distributed.optim import PostLocalSGDOptimizer
        opt = PostLocalSGDOptimizer(inner, averagers.PeriodicModelAverager(every, args.sync_warmup))
    anchor = [p.detach().clone() for p in model.parameters()]
    outer = torch.optim.SGD(anchor, lr=args.outer_lr, momentum=args.outer_momentum,
                            nesterov=args.outer_momentum > 0)
    sent = wire_bytes(model, "allreduce" if kind != "step" else args.hook, args.ranks) / every
    out = open(args.metrics, "w") if rank == 0 else None
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    start, step = time.perf_counter(), 0
    for epoch in range(args.epochs):
        if step >= total:
            break
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
            args.seed * 100 + epoch))
        mine = order[rank::args.ranks]
        ddp.train()
        for b in range(steps_per_epoch):
            if step >= total:
                break
            index = mine[b * args.batch:(b + 1) * args.batch]
            x = augment(train_x[index], generator)
            loss = F.cross_entropy(ddp(x), train_y[index])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            step += 1
            if kind == "diloco" and (step % every == 0 or b + 1 == steps_per_epoch or step == total):
                torch_ddp.diloco_sync(model, anchor, outer, args.ranks)
            if out and (step % 50 == 0 or b + 1 == steps_per_epoch):
                out.write(json.dumps({"kind": "step", "step": step, "epoch": epoch,
                                      "loss": loss.item(), "bytes_sent": sent}) + "\n")
        if kind == "diloco":
            # The outer step moved the weights past the averaged statistics.
            order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
                args.seed * 100 + 7 * epoch + 1))[:20 * args.batch]
            own = torch.Generator().manual_seed(args.seed * 100 + 7 * epoch + 2)
            batches = [augment(train_x[order[i:i + args.batch]], own)
                       for i in range(0, len(order), args.batch)]
            torch.optim.swa_utils.update_bn(batches, model)
        # Every rank evaluates the whole test set (as the trainer's evaluation, one number).
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test_x), 500):
                correct += (model(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum().item()
        if out:
            acc = correct / len(test_x)
            out.write(json.dumps({"kind": "epoch", "epoch": epoch, "test_acc": acc,
                                  "wall_s": time.perf_counter() - start}) + "\n")
            out.flush()
            print(f"epoch {epoch + 1}: test accuracy {100 * acc:.2f}%", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--metrics", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hook", default="allreduce", choices=torch_ddp.HOOKS)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--sync", default="step")
    p.add_argument("--sync-warmup", type=int, default=0)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    args = p.parse_args()
    kind = args.sync.split(":")[0]
    if args.sync != "step" and (kind not in ("local", "diloco") or not args.sync[len(kind) + 1:].isdigit()
                                or int(args.sync[len(kind) + 1:]) < 1):
        sys.exit(f"torch_train: --sync '{args.sync}' is not known; expected step, local:H or diloco:H")
    if args.sync != "step" and args.hook != "allreduce":
        sys.exit("torch_train: --sync local|diloco averages with plain all-reduces; leave out --hook")
    mp.spawn(worker, args=(args,), nprocs=args.ranks)
