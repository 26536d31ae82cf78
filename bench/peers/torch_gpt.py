#!/usr/bin/python3
"""The PyTorch peer of pactrain's GPT (apps/models/gpt.h), for bench/run_lm.sh: the same
architecture (token and position embeddings, pre-norm blocks of causal self-attention with biases
and a GELU MLP, a final LayerNorm, the head tied to the token embedding, GPT-2's initialisation),
the same character vocabulary and 90/10 split of the same text, the same batch, steps and
schedule (linear warm-up multiplying a cosine decay to --min-lr, as pactrain's `cosine:MIN_LR`
with --warmup), gradient clipping, AdamW with nanoGPT's grouping (no decay on 1-D parameters) and the same fixed
validation windows. Training windows are drawn from torch's generator, so the two runs see
different (equally random) batches. Alone it trains in one process; with --ranks N it runs
DistributedDataParallel over gloo with the given --hook (torch_ddp.py). One thread per process.
Writes JSON lines like pactrain's --metrics: {"kind": "step", "step", "loss", "step_s"} every
--log-every steps and {"kind": "eval", "step", "test_loss", "wall_s"} every --eval-every steps
and at the end. With --json rank 0 prints one JSON object: the mean step_s after the first two
steps and samples_per_s (sequences, all ranks), as torch_ddp.py does for the testbed; --rank R
runs that one rank only, for launchers that start each rank on its own host.
Usage: torch_gpt.py --text-file F [--depth 4 --heads 4 --dim 128 --context 64] [--batch 12]
       [--steps 2000] [--lr 1e-3 --min-lr 1e-4 --warmup 100] [--clip-grad 1]
       [--eval-every 250 --eval-iters 20]
       [--ranks N [--rank R] --hook allreduce] [--metrics FILE] [--json] [--seed S]"""
import argparse
import json
import math
import os
import sys
import time

# One thread each: OpenBLAS would otherwise start its own threads beside torch's.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def attention(self, x):
        n, t, d = x.shape
        q, k, v = self.in_proj(x).split(d, dim=2)
        q, k, v = (z.view(n, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        y = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.out_proj(y.transpose(1, 2).reshape(n, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, depth, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                residual = name.endswith("out_proj.weight") or name.endswith("fc2.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * depth) if residual else 0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def load(path):
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = len(tokens) * 9 // 10
    return len(chars), tokens[:split], tokens[split:]


def lr_at(step, args):
    """pactrain's cosine:MIN_LR over the run, times its linear warm-up."""
    cosine = args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps)))
    return cosine * min(1.0, (step + 1) / args.warmup) if args.warmup > 0 else cosine


def evaluate(model, val, args):
    windows = min((len(val) - 1) // args.context, args.eval_iters * args.batch or 1 << 62)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for first in range(0, windows, args.batch):
            rows = range(first, min(windows, first + args.batch))
            x = torch.stack([val[w * args.context:(w + 1) * args.context] for w in rows])
            y = torch.stack([val[w * args.context + 1:(w + 1) * args.context + 1] for w in rows])
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                     reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count


def run(rank, args):
    torch.set_num_threads(1)
    if args.ranks > 1:
        import torch_ddp
        torch_ddp.start_gloo(rank, args.ranks, 29519)
    vocab, train, val = load(args.text_file)
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.context, args.dim, args.depth, args.heads)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, args.beta2))
    net = model
    if args.ranks > 1:
        import torch_ddp
        net = torch_ddp.wrap(model, args.hook)
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    out = open(args.metrics, "w") if args.metrics and rank == 0 else None

    def write(record):
        if out:
            out.write(json.dumps(record) + "\n")
            out.flush()

    start = time.perf_counter()
    timed = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        starts = torch.randint(len(train) - args.context, (args.batch,), generator=generator)
        x = torch.stack([train[s:s + args.context] for s in starts])
        y = torch.stack([train[s + 1:s + 1 + args.context] for s in starts])
        logits = net(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
        optimizer.step()
        step_s = time.perf_counter() - t0
        if step >= 2:
            timed.append(step_s)
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            write({"kind": "step", "step": done, "loss": loss.item(), "step_s": step_s})
        if (args.eval_every and done % args.eval_every == 0) or done == args.steps:
            # Every rank evaluates (they hold the same model); rank 0 reports.
            val_loss = evaluate(model, val, args)
            write({"kind": "eval", "step": done, "test_loss": val_loss,
                   "bits_per_token": val_loss / math.log(2), "wall_s": time.perf_counter() - start})
            if rank == 0 and not args.json:
                print(f"step {done}: validation loss {val_loss:.4f}", flush=True)
    if args.json and rank == 0 and timed:
        step_s = sum(timed) / len(timed)
        print(json.dumps({"model": "gpt", "hook": args.hook, "step_s": step_s,
                          "samples_per_s": args.batch * args.ranks / step_s}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text-file", required=True)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--rank", type=int, help="run this rank only (hosts mode)")
    p.add_argument("--hook", default="allreduce")
    p.add_argument("--json", action="store_true")
    p.add_argument("--metrics")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.rank is not None:
        run(args.rank, args)
    elif args.ranks > 1:
        import torch.multiprocessing as mp
        mp.spawn(run, args=(args,), nprocs=args.ranks)
    else:
        run(0, args)


if __name__ == "__main__":
    main()
