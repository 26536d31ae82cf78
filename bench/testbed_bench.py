#!/usr/bin/python3
"""One rate of the head-to-head (bench/run_testbed.sh runs it inside scripts/testbed): calibrates
the link, then trains each model with each method for a few steps on synthetic data, pactrain under
mpiexec and PyTorch DDP on gloo with the same model shapes, per-rank batch and one thread per rank,
and appends one JSON object per run to --out:
  rate, link_mbit (calibrated), model, method, impl, ranks, batch, steps (timed), samples_per_s, step_s,
  compute_s, codec_s, comm_exposed_s, exchanges, exchanges_after_backward, cpu_s,
  communication_cpu_s and wakeups (ours: per step, rank 0), bytes_per_step (per rank), date, commit
The first --warmup steps of each of our runs are left out (connections, the pruning event, plans).
Models: resnet18, resnet20, vit, and the language models gpt-nano and gpt-mini (on a text this
script writes, their peer bench/peers/torch_gpt.py).
Usage: testbed_bench.py --rate R --out FILE [--models a,b] [--methods m1,m2] [--ranks N]
                        [--steps S] [--batch B]"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))

# Our methods: the --compress setting and its options. DGC's settings for topk: 0.1% density,
# momentum correction 0.9 (the optimizer's momentum then moves only the weight decay), factor
# masking, no warm-up (a throughput run is too short for one).
OURS = {
    "dense": ["--compress", "dense"],
    "fp16": ["--compress", "fp16"],
    "topk": ["--compress", "topk", "--compress-opt", "ratio=0.001", "--compress-opt",
             "momentum=0.9"],
    "randomk": ["--compress", "randomk", "--compress-opt", "ratio=0.01"],
    "terngrad": ["--compress", "terngrad"],
    "signsgd": ["--compress", "signsgd"],
    "powersgd2": ["--compress", "powersgd", "--compress-opt", "rank=2", "--compress-opt",
                  "start_iter=2"],
    "powersgd4": ["--compress", "powersgd", "--compress-opt", "rank=4", "--compress-opt",
                  "start_iter=2"],
}
# Ternary runs take the trainer's defaults: error feedback with SGD (the image models), levels=15
# without error feedback with AdamW (the language models).
for sparsity in (80, 90):
    for enc in ("fp32", "ternary"):
        OURS[f"pactrain{sparsity}-{enc}"] = [
            "--prune", "magnitude", "--sparsity", str(sparsity / 100), "--prune-schedule",
            "oneshot:0", "--compress", "pactrain", "--compress-opt", f"enc={enc}"]
    # The default codes in -3..3 steps of s/3; levels=1 is TernGrad's -1, 0, 1.
    OURS[f"pactrain{sparsity}-ternary-levels1"] = OURS[f"pactrain{sparsity}-ternary"] + [
        "--compress-opt", "levels=1"]
    # The 1-D parameters beside the codes in bf16 instead of fp32.
    OURS[f"pactrain{sparsity}-ternary-bf16oned"] = OURS[f"pactrain{sparsity}-ternary"] + [
        "--compress-opt", "enc1d=bf16"]
PEERS = {"torch-allreduce": "allreduce", "torch-fp16": "fp16", "torch-powersgd2": "powersgd2",
         "torch-powersgd4": "powersgd4"}
# PyTorch's post-local SGD and a DiLoCo loop (bench/peers/torch_ddp.py --sync) on the image
# models: torch-localH and torch-dilocoH, as bench/run_accuracy.sh names their accuracy runs.
MODELS = {  # our options for the shapes of bench/peers/torch_step.py
    "resnet18": ["--model", "resnet18", "--small-input", "--in-channels", "1"],
    # In three buckets in fp32, as bench/run_accuracy.sh trains it: DDP's 1 MB first bucket would
    # hold 96% of its 1.09 MB gradient, complete about 48 ms before backward ends (145 ms for this
    # first one). The sizes are bytes on the wire, so a coded method's gradient fits one bucket:
    # --extra '--first-bucket-mb 0.004 --bucket-mb 0.008' gives it the recipe's small buckets.
    "resnet20": ["--model", "resnet20", "--in-channels", "1", "--first-bucket-mb", "0.4",
                 "--bucket-mb", "0.5"],
    "vit": ["--model", "vit", "--in-channels", "3"],
}
# Language models (apps/models/gpt.h) and the sizes bench/peers/torch_gpt.py builds them with:
# depth, heads, width, context. They train on a text this script writes (65 characters, like
# tinyshakespeare's vocabulary), with AdamW as nanoGPT.
GPTS = {"gpt-nano": (4, 4, 128, 64), "gpt-mini": (6, 6, 384, 256)}
GPT_OPTIONS = ["--optimizer", "adamw", "--lr", "1e-3", "--beta2", "0.99", "--weight-decay", "0.1",
               "--no-decay-1d", "--clip-grad", "1"]


def write_text(path, characters=400_000):
    """Random text over 65 characters: throughput does not depend on what the text says."""
    import random
    alphabet = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    rng = random.Random(1)
    with open(path, "w") as f:
        f.write("".join(rng.choice(alphabet) for _ in range(characters)))


def model_options(model, steps, ranks, batch, text, extra=()):
    """Our options for `model`: synthetic images of the peer's shapes, or the text for a GPT.
    A bucket size in `extra` (--extra) replaces the model's own."""
    if model in GPTS:
        return ["--model", model, "--data", "text", "--text-file", text, "--epochs", "1000",
                "--eval-iters", "1", *GPT_OPTIONS]
    own = list(MODELS[model])
    for name in ("--first-bucket-mb", "--bucket-mb"):
        if name in extra and name in own:
            del own[own.index(name):own.index(name) + 2]
    return [*own, "--image-size", "28", "--num-classes", "10", "--data", "synthetic",
            "--synthetic-size", str(batch * ranks * (steps + 1)), "--test-subset", "8",
            "--epochs", "1"]


def run_all(cmds, timeout):
    """Runs the commands at the same time, each in a session of its own, and returns their stdouts;
    on timeout every session is killed (mpiexec's and torch.multiprocessing's children too, which
    would hold the pipes open)."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for cmd in cmds]
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for cmd, proc in zip(cmds, procs):
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if proc.returncode != 0:
                raise subprocess.CalledProcessError(proc.returncode, cmd, out, err)
            outs.append(out)
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        raise
    return outs


def run(cmd, timeout):
    return run_all([cmd], timeout)[0]


def mpiexec(ranks):
    """The launcher for `ranks` ranks: on this machine's shaped loopback (scripts/testbed's shared
    mode), or one rank per host namespace (hosts mode, each rank its own shaped link)."""
    cmd = ["mpiexec", "--oversubscribe", "-n", str(ranks)]
    if os.environ.get("TESTBED_MODE") == "hosts":
        # Every "host" is this machine: left to itself, each one's mpirun daemon binds its rank
        # to its first core, the same core for every rank.
        cmd += ["--hostfile", os.environ["TESTBED_HOSTFILE"], "--mca", "plm_rsh_agent",
                os.environ["TESTBED_RSH"], "--bind-to", "none"]
    return cmd


def calibrate(rate, ranks):
    out = subprocess.run(mpiexec(ranks) + [os.path.join(BUILD, "bench-allreduce"), "--rate", rate],
                         capture_output=True, text=True, check=True).stdout
    print(out.strip(), flush=True)
    m = re.search(r"carried ([0-9.]+) Mbit/s", out)
    return float(m.group(1)) if m else None


def split_sync(method):
    """'pactrain80-ternary-diloco32' -> ('pactrain80-ternary', ['--sync', 'diloco:32'], 32);
    Streaming DiLoCo in F fragments: 'dense-diloco32-fragments4' -> ('dense',
    ['--sync', 'diloco:32:fragments=4'], 32)."""
    m = re.match(r"^(.*)-(local|diloco)([0-9]+)(-fragments([0-9]+))?$", method)
    if not m or (m.group(4) and m.group(2) != "diloco"):
        return method, [], 1
    sync = f"{m.group(2)}:{m.group(3)}" + (f":fragments={m.group(5)}" if m.group(4) else "")
    return m.group(1), ["--sync", sync], int(m.group(3))


def ours(model, method, args, compute_only=False):
    """Our trainer under mpiexec; compute-only: one process per rank, each training alone (no
    communication), all at the same time, so that they share the cores as the ranks of a real run
    do (with more ranks than cores, each gets a part of one). A method with a -localH or -dilocoH
    suffix synchronises every H steps, and is timed over whole periods."""
    method, sync, period = split_sync(method)
    # With a period, the first one is left out and whole periods are timed, so that the run ends
    # on a synchronisation and no extra one (the end of the run's) falls in the window.
    warmup = period if sync else args.warmup
    steps = -(-args.steps // period) * period + warmup
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        if model in GPTS:
            write_text(text)

        def command(metrics, ranks):
            return ([] if ranks == 1 else mpiexec(ranks)) + [
                os.path.join(BUILD, "pactrain"), "train",
                *model_options(model, steps, ranks, args.batch, text, args.extra),
                "--batch", str(args.batch), "--max-steps", str(steps),
                "--threads", "1", "--log-every", "1", "--quiet", "--metrics", metrics,
                *(OURS["dense"] if compute_only else OURS[method] + sync + args.extra)]
        files = [os.path.join(tmp, f"metrics{i}.jsonl")
                 for i in range(args.ranks if compute_only else 1)]
        run_all([command(f, 1 if compute_only else args.ranks) for f in files], args.timeout)
        records = [json.loads(line) for f in files for line in open(f)]
    # Streaming ends the run with every fragment synchronising at once (as it ends an epoch): a
    # burst that a run pays once an epoch, left out as the warm-up is.
    last = steps - 1 if any("fragments" in option for option in sync) else steps
    steps_ = [r for r in records if r["kind"] == "step" and warmup < r["step"] <= last]
    mean = lambda key: sum(r[key] for r in steps_) / len(steps_)
    step_s = mean("step_s")
    return {"samples_per_s": args.batch * args.ranks / step_s, "step_s": step_s,
            "compute_s": mean("compute_s"), "codec_s": mean("codec_s"),
            "comm_exposed_s": mean("comm_exposed_s"),
            "exchanges": mean("exchanges"),
            "exchanges_after_backward": mean("exchanges_after_backward"),
            "cpu_s": mean("cpu_s"), "communication_cpu_s": mean("communication_cpu_s"),
            "wakeups": mean("wakeups"),
            "bytes_per_step": 0 if compute_only else mean("bytes_sent")}


PORTS = list(range(200))


def peer(model, hook, args, sync=()):
    """PyTorch DDP: its ranks spawned here, or in hosts mode one per host (rank i on host
    10.77.0.(i+1), started through the testbed's rsh agent). `sync`: ['--sync', 'local:H']."""
    command = ["/usr/bin/python3", os.path.join(ROOT, "bench/peers/torch_ddp.py"), "--ranks",
               str(args.ranks), "--steps", str(args.steps), "--batch", str(args.batch), "--models",
               model, "--hook", hook, "--json", *sync]
    if model in GPTS:
        tmp = tempfile.TemporaryDirectory()
        text = os.path.join(tmp.name, "text.txt")
        write_text(text)
        depth, heads, dim, context = GPTS[model]
        # Its first two steps are left out of the mean, as torch_ddp.py's warm-up steps are.
        command = ["/usr/bin/python3", os.path.join(ROOT, "bench/peers/torch_gpt.py"),
                   "--text-file", text, "--depth", str(depth), "--heads", str(heads), "--dim",
                   str(dim), "--context", str(context), "--batch", str(args.batch), "--steps",
                   str(args.steps + 2), "--eval-every", "0", "--eval-iters", "1", "--ranks",
                   str(args.ranks), "--hook", hook, "--json"]
    # A fresh port each run: the last run's may still be in TIME_WAIT, and gloo would fail to bind.
    os.environ["MASTER_PORT"] = str(29600 + PORTS.pop())
    if os.environ.get("TESTBED_MODE") == "hosts":
        rsh = os.environ["TESTBED_RSH"]
        outs = run_all([command + ["--rank", "0"]] +
                       [[rsh, f"10.77.0.{i + 1}", *command, "--rank", str(i)]
                        for i in range(1, args.ranks)], args.timeout)
        out = outs[0]
    else:
        out = run(command, args.timeout)
    r = json.loads(out.strip().splitlines()[-1])
    return {"samples_per_s": r["samples_per_s"], "step_s": r["step_s"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rate", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="resnet18,vit")
    p.add_argument("--methods", default=",".join(["compute-only", *OURS, *PEERS]))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    p.add_argument("--extra", default="",
                   help="more trainer options for our methods, e.g. smaller gradient buckets "
                        "('--first-bucket-mb 0.05 --bucket-mb 0.25'); kept in each row")
    args = p.parse_args()
    args.extra = shlex.split(args.extra)
    for name in args.methods.split(","):
        base, sync, _ = split_sync(name)
        torch_sync = base == "torch" and sync
        if base not in OURS and name not in PEERS and name != "compute-only" and not torch_sync:
            sys.exit(f"testbed_bench: unknown method '{name}'; expected compute-only, "
                     f"{', '.join(OURS)} or {', '.join(PEERS)} (ours with -localH, -dilocoH or "
                     "-dilocoH-fragmentsF), torch-localH or torch-dilocoH")
        if torch_sync and "fragments" in sync[1]:
            sys.exit(f"testbed_bench: {name}: the PyTorch DiLoCo loop does not stream; "
                     "expected torch-dilocoH")
        if torch_sync and any(m in GPTS for m in args.models.split(",")):
            sys.exit("testbed_bench: torch-localH and torch-dilocoH time the image models only")
    for model in args.models.split(","):
        if model not in MODELS and model not in GPTS:
            sys.exit(f"testbed_bench: unknown model '{model}'; expected "
                     f"{', '.join([*MODELS, *GPTS])}")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    link = calibrate(args.rate, args.ranks)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for model in args.models.split(","):
        for method in args.methods.split(","):
            try:
                if method in PEERS:
                    r, impl = peer(model, PEERS[method], args), "pytorch"
                elif split_sync(method)[0] == "torch":
                    r, impl = peer(model, "allreduce", args, split_sync(method)[1]), "pytorch"
                else:
                    r, impl = ours(model, method, args, method == "compute-only"), "pactrain"
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError) as e:
                print(f"{args.rate} {model} {method}: FAILED ({e})", flush=True)
                continue
            r.update({"rate": args.rate, "mode": os.environ.get("TESTBED_MODE", "unshaped"),
                      "link_mbit": link, "model": model, "method": method,
                      "impl": impl, "ranks": args.ranks, "batch": args.batch, "steps": args.steps,
                      **({"extra": " ".join(args.extra)} if args.extra and impl == "pactrain"
                         else {}),
                      "date": datetime.date.today().isoformat(), "commit": commit})
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"{args.rate} {model} {method}: {r['samples_per_s']:.1f} samples/s, "
                  f"{r['step_s']:.3f} s/step", flush=True)


if __name__ == "__main__":
    main()
