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
ResNet-18 at every rate and on the ViT now and then, and ResNet-20 in its first steps ("1428 vs
160") until DDP's first bucket, which it makes anew when it rebuilds its buckets after the first
step, was raised too. One bucket costs the hook its overlap with backward; its messages are small.
Prints "name seconds_per_step" per model (rank 0), or with --json one JSON object per model with
step_s and samples_per_s (all ranks together). With --rank R it runs that one rank only, for
launchers that start each rank on its own host (scripts/testbed --mode hosts: MASTER_ADDR and
GLOO_SOCKET_IFNAME come from the environment).
--sync local:H times PyTorch's post-local SGD (post_localSGD_hook on one-rank groups and
PostLocalSGDOptimizer with a PeriodicModelAverager of period H), --sync diloco:H a DiLoCo loop
written out as torch_train.py's (one all-reduce per tensor of the pseudo-gradient every H steps,
an outer Nesterov SGD step, buffers averaged); both over whole periods: one period of warm-up,
then --steps rounded up to periods.
Usage: torch_ddp.py [--ranks N] [--rank R] [--steps S] [--batch B] [--models a,b,c] [--hook H]
                    [--sync step|local:H|diloco:H] [--json]"""
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
    one_bucket = {}
    if hook.startswith("powersgd"):
        cap_mb = 1 << 12  # above any model's gradient here
        one_bucket = {"bucket_cap_mb": cap_mb}
        # DDP rebuilds its buckets after the first step with a first bucket of its own, 1 MB by
        # default, which would split ResNet-20's 1.09 MB gradient in two again.
        dist._DEFAULT_FIRST_BUCKET_BYTES = cap_mb << 20
    ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False, **one_bucket)
    attach_hook(ddp, hook)
    return ddp


def diloco_sync(model, anchor, outer, ranks):
    """DiLoCo's synchronisation: the pseudo-gradient anchor - local, averaged with one all-reduce
    per tensor, an outer step from the anchor, every rank continuing from the result; buffers
    averaged."""
    with torch.no_grad():
        for a, p in zip(anchor, model.parameters()):
            a.grad = a - p
            dist.all_reduce(a.grad)
            a.grad /= ranks
        outer.step()
        for a, p in zip(anchor, model.parameters()):
            p.copy_(a)
        for buffer in model.buffers():
            if buffer.is_floating_point():
                dist.all_reduce(buffer)
                buffer /= ranks


def synchronising_step(model, channels, batch, ranks, sync):
    """A training step of `model` that communicates as --sync says, and its period."""
    import torch_step
    kind, every = sync.split(":")
    every = int(every)
    if kind == "local":
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as local_sgd
        from torch.distributed.algorithms.model_averaging import averagers
        from torch.distributed.optim import PostLocalSGDOptimizer
        # One-rank groups (new_subgroups needs CUDA in PyTorch 1.13): every rank creates every
        # group and keeps its own, so local steps communicate nothing.
        alone = [dist.new_group([r]) for r in range(ranks)][dist.get_rank()]
        ddp = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
        ddp.register_comm_hook(local_sgd.PostLocalSGDState(None, alone, 0),
                               local_sgd.post_localSGD_hook)
        return torch_step.make_step(ddp, channels, batch, lambda opt: PostLocalSGDOptimizer(
            opt, averagers.PeriodicModelAverager(every, 0))), every
    inner = torch_step.make_step(model, channels, batch)
    anchor = [p.detach().clone() for p in model.parameters()]
    outer = torch.optim.SGD(anchor, lr=0.7, momentum=0.9, nesterov=True)
    count = [0]

    def step():
        inner()
        count[0] += 1
        if count[0] % every:
            return
        diloco_sync(model, anchor, outer, ranks)

    return step, every


def worker(rank, args):
    start_gloo(rank, args.ranks, 29517)
    import torch_step
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, channels = torch_step.make(name)
        if args.sync == "step":
            step, warmup, steps = torch_step.make_step(wrap(model, args.hook), channels,
                                                       args.batch), 3, args.steps
        else:
            step, every = synchronising_step(model, channels, args.batch, args.ranks, args.sync)
            warmup, steps = every, -(-args.steps // every) * every  # whole periods
        for _ in range(warmup):  # past PowerSGD's dense start, or one period
            step()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = (time.perf_counter() - t0) / steps
        if rank == 0 and args.json:
            print(json.dumps({"model": name, "hook": args.hook, "step_s": seconds,
                              "samples_per_s": args.batch * args.ranks / seconds}), flush=True)
        elif rank == 0:
            print(f"{name} {seconds:.5f}", flush=True)
    # Every rank done with its collectives before any tears the group down: a rank that left
    # while the other still held a connection aborted now and then at exit (gloo, PyTorch 1.13).
    dist.barrier()
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
    parser.add_argument("--sync", default="step")
    args = parser.parse_args()
    kind = args.sync.split(":")[0]
    if args.sync != "step" and (kind not in ("local", "diloco")
                                or not args.sync[len(kind) + 1:].isdigit()
                                or int(args.sync[len(kind) + 1:]) < 1):
        sys.exit(f"torch_ddp: --sync '{args.sync}' is not known; expected step, local:H or "
                 "diloco:H")
    if args.sync != "step" and args.hook != "allreduce":
        sys.exit("torch_ddp: --sync local|diloco averages with plain all-reduces; leave out --hook")
    if args.rank is None:
        mp.spawn(worker, args=(args,), nprocs=args.ranks)
    elif 0 <= args.rank < args.ranks:
        worker(args.rank, args)
    else:
        sys.exit(f"torch_ddp: --rank {args.rank} is not in [0, {args.ranks})")
