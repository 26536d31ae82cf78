#!/usr/bin/python3
"""The PyTorch DDP peer of bench/run_ddp.sh and bench/run_testbed.sh: the models of torch_step.py
trained by N processes with DistributedDataParallel over gloo on this machine, one thread each.
--hook picks DDP's gradient communication: allreduce (the default, dense fp32), fp16
(fp16_compress_hook), powersgd2 / powersgd4 (powerSGD_hook of rank 2 / 4, dense for the first 2
steps, then compressed, with error feedback and warm start as PyTorch's defaults). DDP is built
with broadcast_buffers=False: pactrain does not broadcast batch-norm buffers every step either.
With powerSGD_hook, DDP gets one bucket for the whole model: with several, the hook issues each
bucket's second and third all-reduce from gloo's completion callbacks, so two ranks can issue
them in different orders; gloo then pairs all-reduces of different sizes and aborts ("enforce
fail at pair.cc:510 op.preamble.length <= op.nbytes. 4608 vs 1044"), which PyTorch 1.13 did on
ResNet-18 at every rate and on the ViT now and then. One bucket costs the hook its overlap with
backward; its messages are small.
Prints "name seconds_per_step" per model (rank 0), or with --json one JSON object per model with
step_s and samples_per_s (all ranks together). With --rank R it runs that one rank only, for
launchers that start each rank on its own host (scripts/testbed --mode hosts: MASTER_ADDR and
GLOO_SOCKET_IFNAME come from the environment).
Usage: torch_ddp.py [--ranks N] [--rank R] [--steps S] [--batch B] [--models a,b,c] [--hook H]
                    [--json]"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HOOKS = ("allreduce", "fp16", "powersgd2", "powersgd4")


def attach_hook(ddp, hook):
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook.startswith("powersgd"):
        state = powersgd.PowerSGDState(process_group=None,
                                       matrix_approximation_rank=int(hook[len("powersgd"):]),
                                       start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)


def start_gloo(rank, ranks, port):
    """Joins the gloo group of `ranks` processes, one thread each; MASTER_ADDR and
    GLOO_SOCKET_IFNAME default to this machine's loopback (the testbed sets them otherwise)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)


def wrap(model, hook):
    """DDP without buffer broadcasts, with `hook` attached; PowerSGD gets one bucket (see the
    header)."""
    one_bucket = {"bucket_cap_mb": 1 << 12} if hook.startswith("powersgd") else {}
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, **one_bucket)
    attach_hook(ddp, hook)
    return ddp


def worker(rank, args):
    start_gloo(rank, args.ranks, 29517)
    import torch_step
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, channels = torch_step.make(name)
        ddp = wrap(model, args.hook)
        step = torch_step.make_step(ddp, channels, args.batch)
        for _ in range(3):  # past PowerSGD's dense start
            step()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        seconds = (time.perf_counter() - t0) / args.steps
        if rank == 0 and args.json:
            print(json.dumps({"model": name, "hook": args.hook, "step_s": seconds,
                              "samples_per_s": args.batch * args.ranks / seconds}), flush=True)
        elif rank == 0:
            print(f"{name} {seconds:.5f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--models", default="resnet20,resnet18,vit")
    parser.add_argument("--hook", default="allreduce", choices=HOOKS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rank", type=int, default=None)
    args = parser.parse_args()
    if args.rank is None:
        mp.spawn(worker, args=(args,), nprocs=args.ranks)
    elif 0 <= args.rank < args.ranks:
        worker(args.rank, args)
    else:
        sys.exit(f"torch_ddp: --rank {args.rank} is not in [0, {args.ranks})")
