#!/usr/bin/env bash
# The GPU check's timing harness, run on the CPU with tiny inputs so that it is known to work
# before a GPU is at hand: bench-gpu-step for an image model and GPT-2 small, dense and with 80%
# of every weight masked, and its GEMM, then bench/gpu_table.py must print the tables from its lines.
# Usage: tests/bench_gpu_step_cpu.sh BENCH_GPU_STEP
set -euo pipefail
bench="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
tiny=(--device cpu --steps 1 --warmup 0 --batch 2)
"$bench" "${tiny[@]}" --models resnet50 --image-size 32 > "$dir/bench.jsonl"
"$bench" "${tiny[@]}" --models resnet50 --image-size 32 --sparsity 0.8 >> "$dir/bench.jsonl"
"$bench" "${tiny[@]}" --models gpt2-small --context 8 >> "$dir/bench.jsonl"
"$bench" "${tiny[@]}" --models gpt2-small --context 8 --sparsity 0.8 >> "$dir/bench.jsonl"
# pactrain's GEMM on a small square: its table row needs the peak line torch_gpu_step.py prints.
"$bench" "${tiny[@]}" --models gemm --gemm-size 64 >> "$dir/bench.jsonl"
echo '{"framework": "peak", "precision": "fp32", "tflops": 1.0}' >> "$dir/bench.jsonl"
cat "$dir/bench.jsonl"
python3 "$root/bench/gpu_table.py" "$dir/bench.jsonl" | tee "$dir/table.md"
# Every weight of two or more dimensions masked: ResNet-50 has 54, GPT-2 small 50.
grep -q '"model": "resnet50".*"sparsity": 0.80, "masked_weights": 54' "$dir/bench.jsonl"
grep -q '"model": "gpt2-small".*"sparsity": 0.80, "masked_weights": 50' "$dir/bench.jsonl"
grep -q '^| gpt2-small | 2 | fp32 | ' "$dir/table.md"
grep -q '^| resnet50 | fp32 | 80% | ' "$dir/table.md"
grep -q '^| gpt2-small | fp32 | 80% | ' "$dir/table.md"
grep -q '^| 64^3 | fp32 | [0-9.]* | 1.0 | [0-9]*% |' "$dir/table.md"
echo "the GPU step harness runs on the CPU and its tables are complete"
