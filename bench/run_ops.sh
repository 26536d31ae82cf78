#!/usr/bin/env bash
# Times GEMM and conv2d in pactrain (bench-ops) and in PyTorch on this machine, one thread each
# by default, and prints a Markdown table with the time ratio ours / PyTorch (lower is better).
# Usage: bench/run_ops.sh [--threads N] [--repeat R]
# OpenBLAS picks its kernels from the CPU unless OPENBLAS_CORETYPE forces a family; the table
# names the family that ran. To let it choose on a machine that forces one, run
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bench/run_ops.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torch  # the PyTorch peer

threads=1
for ((i = 1; i <= $#; i++)); do
  [ "${!i}" = "--threads" ] && { j=$((i + 1)); threads="${!j}"; }
done
# PyTorch's GEMM goes through the system BLAS (OpenBLAS), which ignores torch.set_num_threads:
# pin every thread pool so both sides really run with the same number of threads.
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"

ours="$(mktemp)" reference="$(mktemp)" peer="$(mktemp)"
trap 'rm -f "$ours" "$reference" "$peer"' EXIT
# pactrain twice: its default convolution (oneDNN when built in) and the im2col + GEMM reference.
"$build/bench-ops" "$@" >"$ours"
"$build/bench-ops" "$@" --conv im2col >"$reference"
/usr/bin/python3 "$root/bench/peers/torch_ops.py" "$@" >"$peer"

echo "| case | pactrain s | GFLOP/s | im2col s | PyTorch s | GFLOP/s | ratio pactrain/PyTorch | ratio im2col/PyTorch |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
join <(grep -v '^#' "$ours" | sort) <(grep -v '^#' "$reference" | sort) | join - <(sort "$peer") |
  awk '{ printf "| %s | %.4f | %.1f | %.4f | %.4f | %.1f | %.2f | %.2f |\n", $1, $2, $3, $4, $6, $7, $2 / $6, $4 / $6 }'
echo
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); threads: $threads;" \
  "GEMM: $(sed -n 's/^# gemm \(.*\) threads.*/\1/p' "$ours");" \
  "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') (convolution through oneDNN)"
