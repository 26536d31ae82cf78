#!/usr/bin/env bash
# Language models against the PyTorch peer (bench/peers/torch_gpt.py) on tinyshakespeare:
# nanoGPT's CPU recipe (gpt-nano: context 64, batch 12, lr 1e-3 with 100 warm-up steps and cosine
# decay to 1e-4, AdamW betas 0.9/0.99, weight decay 0.1 on 2-D parameters only, clipping at 1,
# dropout 0), one thread per process. Each run writes out/lm/NAME.{log,jsonl}; the table is built
# from whatever runs exist.
# Usage: bench/run_lm.sh [--steps N] [--text FILE] [--out DIR] [RUN ...]
#   RUN: nano (pactrain, one process), torch-nano (the peer, one process), nano-2 (pactrain,
#        2 ranks, dense), nano-2-t80 (2 ranks, 80% global magnitude pruning ramped over steps
#        200-1200, pactrain's default ternary), nano-2-p80 (the same with fp32 values),
#        nano-2-t80-layer, nano-2-p80-layer (every weight tensor pruned to 80% instead of one
#        global ranking), with -levelsL (--compress-opt levels=L: codes in -L..L) or -noef
#        (ternary without error feedback, fresh scales) after any t80 run;
#        torch-nano-2 (the peer under DDP, 2 ranks); nano-2-localH and
#        nano-2-dilocoH (2 ranks, dense, synchronising every H steps: docs/local-sgd.md; with -fF
#        streaming DiLoCo in F fragments; evaluated
#        at the end only, as the ranks' models differ between synchronisations); --table prints
#        the table;
#        mini-2 and torch-mini-2: gpt-mini (nanoGPT's shakespeare-char model: 6 layers, 6 heads,
#        width 384, context 256) on 2 ranks, batch 8 each, dense, the same schedule and dropout 0
#        (the peer has none), 1000 steps unless --steps says otherwise (about 30 minutes on the
#        2-core machine), evaluated every 100 steps on 20 batches.
#   A last -seedN suffix on any run trains it with seed N instead of 1 (nano-seed2).
#   Default: nano torch-nano nano-2 nano-2-t80.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="$root/out/lm"
text="$root/../shared/data/tinyshakespeare.txt"
steps=""  # 2000 for gpt-nano, 1000 for gpt-mini
runs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --table) runs=(--table); shift ;;
    *) runs+=("$1"); shift ;;
  esac
done
[ ${#runs[@]} -eq 0 ] && runs=(nano torch-nano nano-2 nano-2-t80)
mini_steps="${steps:-1000}" steps="${steps:-2000}"
[ "${runs[0]}" = --table ] && runs=()
mkdir -p "$out"
[ ${#runs[@]} -gt 0 ] && [ ! -f "$text" ] && { echo "no text file '$text' (--text FILE)" >&2; exit 2; }
[ ${#runs[@]} -gt 0 ] && [ -z "${BUILD_DIR:-}" ] && "$root/scripts/build.sh" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

recipe=(--model gpt-nano --data text --text-file "$text" --batch 12 --max-steps "$steps"
        --epochs 1000 --optimizer adamw --lr 1e-3 --schedule cosine:1e-4 --warmup 100
        --beta2 0.99 --weight-decay 0.1 --no-decay-1d --clip-grad 1
        --eval-iters 20 --threads 1 --log-every 50)
every=(--eval-every 250)
peer=(/usr/bin/python3 "$root/bench/peers/torch_gpt.py" --text-file "$text" --steps "$steps"
      --depth 4 --heads 4 --dim 128 --context 64 --batch 12 --lr 1e-3 --min-lr 1e-4 --warmup 100
      --beta2 0.99 --weight-decay 0.1 --clip-grad 1 --eval-every 250 --eval-iters 20)
# gpt-mini: the same optimiser and schedule over mini_steps, batch 8 per rank.
mini=(--model gpt-mini --data text --text-file "$text" --batch 8 --max-steps "$mini_steps"
      --epochs 1000 --optimizer adamw --lr 1e-3 --schedule cosine:1e-4 --warmup 100
      --beta2 0.99 --weight-decay 0.1 --no-decay-1d --clip-grad 1 --dropout 0
      --eval-every 100 --eval-iters 20 --threads 1 --log-every 50)
mini_peer=(/usr/bin/python3 "$root/bench/peers/torch_gpt.py" --text-file "$text"
           --steps "$mini_steps" --depth 6 --heads 6 --dim 384 --context 256 --batch 8 --lr 1e-3
           --min-lr 1e-4 --warmup 100 --beta2 0.99 --weight-decay 0.1 --clip-grad 1
           --eval-every 100 --eval-iters 20)

for run in "${runs[@]+"${runs[@]}"}"; do
  # A last -seedN suffix trains the same run with seed N (default 1), e.g. nano-seed2.
  name="$run" seed=1
  if [[ "$run" =~ ^(.+)-seed([0-9]+)$ ]]; then
    run="${BASH_REMATCH[1]}" seed="${BASH_REMATCH[2]}"
  fi
  case "$run" in
    nano) "$build/pactrain" train "${recipe[@]}" --seed "$seed" "${every[@]}" --metrics "$out/$name.jsonl" \
            --checkpoint "$out/$name.safetensors" ;;
    nano-2) mpirun -np 2 "$build/pactrain" train "${recipe[@]}" --seed "$seed" "${every[@]}" \
              --metrics "$out/$name.jsonl" ;;
    nano-2-local[0-9]* | nano-2-diloco[0-9]*)
      sync="${run#nano-2-}" fragments=""
      # nano-2-diloco32-f4: streaming, 4 fragments.
      if [[ "$sync" =~ ^(diloco[0-9]+)-f([0-9]+)$ ]]; then
        sync="${BASH_REMATCH[1]}" fragments=":fragments=${BASH_REMATCH[2]}"
      fi
      sync="${sync%%[0-9]*}:${sync##*[a-z]}$fragments"
      mpirun -np 2 "$build/pactrain" train "${recipe[@]}" --seed "$seed" --sync "$sync" \
        --metrics "$out/$name.jsonl" ;;
    nano-2-p80 | nano-2-p80-layer | nano-2-t80 | nano-2-t80-layer | nano-2-t80*-levels[0-9]* | \
    nano-2-t80*-noef)
      scope=global codec=(--compress-opt enc=fp32)
      [[ "$run" == *-layer* ]] && scope=layer
      [[ "$run" == nano-2-t* ]] && codec=(--compress-opt enc=ternary)
      [[ "$run" =~ -levels([0-9]+) ]] && codec+=(--compress-opt "levels=${BASH_REMATCH[1]}")
      # With AdamW a bare nano-2-t80 takes the trainer's AdamW defaults (levels=15 ef=0); a run
      # that names its levels keeps error feedback unless it says -noef.
      if [[ "$run" == *-noef ]]; then
        codec+=(--compress-opt ef=0 --compress-opt scale=fresh)
      elif [[ "$run" == *-levels* ]]; then
        codec+=(--compress-opt ef=1)
      fi
      prune=(--prune magnitude --sparsity 0.8 --prune-scope "$scope"
             --prune-schedule gradual:200:1200:100)
      mpirun -np 2 "$build/pactrain" train "${recipe[@]}" --seed "$seed" "${every[@]}" "${prune[@]}" \
        --compress pactrain "${codec[@]}" --metrics "$out/$name.jsonl" ;;
    mini-2) mpirun -np 2 "$build/pactrain" train "${mini[@]}" --seed "$seed" --metrics "$out/$name.jsonl" ;;
    torch-mini-2)
      "$root/scripts/setup.sh" python3-torch >/dev/null
      "${mini_peer[@]}" --seed "$seed" --ranks 2 --metrics "$out/$name.jsonl" ;;
    torch-nano | torch-nano-2)
      "$root/scripts/setup.sh" python3-torch >/dev/null
      ranks=1; [ "$run" = torch-nano-2 ] && ranks=2
      "${peer[@]}" --seed "$seed" --ranks "$ranks" --metrics "$out/$name.jsonl" ;;
    *) echo "unknown run '$run'; expected nano, torch-nano, nano-2, nano-2-t80, nano-2-p80," \
            "nano-2-t80-layer, nano-2-p80-layer (t80 runs with -levelsL or -noef)," \
            "nano-2-localH, nano-2-dilocoH, torch-nano-2, mini-2 or torch-mini-2" >&2
       exit 2 ;;
  esac > "$out/$name.log" 2>&1
done

/usr/bin/python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
print("| run | steps | validation loss (nats/char) | bits/char | median step s | loss at step 250 / 500 / 1000 |")
print("|---|---:|---:|---:|---:|---|")
extra = sorted(f[:-6] for f in os.listdir(out)
               if f.endswith(".jsonl") and any(k in f for k in ("-local", "-diloco", "-levels",
                                                                "-noef", "-seed")))
for run in ("nano", "torch-nano", "nano-2", "torch-nano-2", "nano-2-p80", "nano-2-t80",
            "nano-2-p80-layer", "nano-2-t80-layer", "mini-2", "torch-mini-2", *extra):
    path = os.path.join(out, run + ".jsonl")
    if not os.path.exists(path):
        continue
    records = [json.loads(line) for line in open(path)]
    evals = {r["step"]: r["test_loss"] for r in records if r["kind"] in ("eval", "epoch")}
    steps = [r["step_s"] for r in records if r["kind"] == "step"]
    if not evals:
        continue
    last = max(evals)
    curve = " / ".join(f"{evals[s]:.3f}" if s in evals else "-" for s in (250, 500, 1000))
    print(f"| {run} | {last} | {evals[last]:.4f} | {evals[last] / 0.6931471805599453:.3f} | "
          f"{statistics.median(steps):.4f} | {curve} |")
PY
