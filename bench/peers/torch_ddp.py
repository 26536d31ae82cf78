#!/usr/bin/python3
"""The PyTorch DDP peer of bench/run_ddp.sh: the models of torch_step.py trained by N processes with
DistributedDataParallel over gloo on this machine, one thread each; prints "name seconds_per_step"
(rank 0). Usage: torch_ddp.py [--ranks N] [--steps S] [--batch B] [--models a,b,c]"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    import torch_step
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, channels = torch_step.make(name)
        step = torch_step.make_step(torch.nn.parallel.DistributedDataParallel(model), channels,
                                    args.batch)
        step()
        step()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        if rank == 0:
            print(f"{name} {(time.perf_counter() - t0) / args.steps:.5f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--models", default="resnet20,resnet18,vit")
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.ranks)
