#!/usr/bin/env bash
# The one-command GPU check, for a machine with an NVIDIA GPU, the CUDA toolkit, CMake, ninja and
# PyTorch (python3): configure and build pactrain with CUDA for that GPU, run the tests labelled
# `gpu`, then time training steps of ResNet-50 (batch 64) and ViT-B/16 (batch 32) on synthetic
# 224x224 data and of GPT-2 small (batch 8 of 1024 tokens) for pactrain and for PyTorch eager on
# the same GPU, in fp32 and in TF32, and pactrain's ResNet-50 and GPT-2 steps with 80% of every
# weight masked against its dense ones, and print the tables. Everything it produces goes to $OUT (default out/gpu_check): the build and test logs,
# gpu_bench.jsonl and gpu_table.md.
#
# Missing -dev packages are taken from .deps/debs (fetched beforehand on a machine with apt by
# scripts/gpu_deps.sh) and unpacked into the private prefix .deps/root; nothing is installed
# into the system. cuDNN and NCCL are found under the toolkit or in PyTorch's nvidia/ wheels.
# Options: --arch SM (default: the GPU's, e.g. 90), --steps N (timed steps per run, default 30).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/out/gpu_check}"
build="${BUILD_DIR:-$root/build-gpu}"
prefix="$root/.deps/root"
arch="" steps=30
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "gpu_check: unknown option '$1' (expected --arch SM or --steps N)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
log() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }
python=python3

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
log "GPU: $(cat "$out/gpu.txt")"
if [ -z "$arch" ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  arch=${arch:-90}
fi

# --- dependencies: a private prefix from the carried .debs, when the system lacks them ---
cmake_deps=()
# PAC_GPU_PREFIX=1 uses the prefix even where the system has the packages (to check this script
# on a machine with apt before spending GPU time on it).
if [ -d "$root/.deps/debs" ] && { ! [ -f /usr/include/fmt/format.h ] || [ "${PAC_GPU_PREFIX:-0}" = 1 ]; }; then
  if ! [ -d "$prefix" ]; then
    "$python" "$root/scripts/unpack_debs.py" "$prefix" "$root"/.deps/debs/*.deb || exit 1
  fi
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  cmake_deps=(
    "-Dfmt_DIR=$lib/cmake/fmt" "-Ddoctest_DIR=$prefix/usr/lib/cmake/doctest"
    "-Dnlohmann_json_DIR=$prefix/usr/share/cmake/nlohmann_json"
    "-DCLI11_DIR=$prefix/usr/share/cmake/CLI11"
    "-DZLIB_INCLUDE_DIR=$prefix/usr/include"
    "-DZLIB_LIBRARY=$(ls "$prefix"/lib/x86_64-linux-gnu/libz.so.1.* | head -1)"
    "-DCBLAS_INCLUDE_DIR=$prefix/usr/include/x86_64-linux-gnu/openblas-pthread"
    "-DOPENBLAS_LIBRARY=$lib/openblas-pthread/libopenblas.so")
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  log "dependencies from $prefix"
fi
# cuDNN and NCCL: the toolkit's, else the ones PyTorch's wheels bring.
wheel_root() { "$python" -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
cuda_roots=()
if ! [ -f /usr/local/cuda/include/cudnn.h ]; then
  cudnn=$(wheel_root cudnn) && cuda_roots+=("-DPAC_CUDNN_ROOT=$cudnn") &&
    export LD_LIBRARY_PATH="$cudnn/lib:${LD_LIBRARY_PATH:-}"
fi
if ! [ -f /usr/local/cuda/include/nccl.h ]; then
  nccl=$(wheel_root nccl) && cuda_roots+=("-DPAC_NCCL_ROOT=$nccl") &&
    export LD_LIBRARY_PATH="$nccl/lib:${LD_LIBRARY_PATH:-}"
fi

# --- build ---
start=$(date +%s)
if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAC_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DPAC_MPI=OFF -DPAC_DNNL=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${cmake_deps[@]}" "${cuda_roots[@]}" &&
  cmake --build "$build" -j "$(nproc)" --target pactrain-gpu-tests pactrain-cli bench-gpu-step; \
  } >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  log "build FAILED (see build.log)"
  exit 1
fi
log "build: $(($(date +%s) - start)) s for sm_$arch"

# --- the GPU tests ---
start=$(date +%s)
(cd "$build" && ctest -L gpu --output-on-failure --timeout 300) >"$out/gpu_tests.log" 2>&1
status=$?
grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/gpu_tests.log" | tail -15
log "gpu tests: $(grep -E 'tests passed' "$out/gpu_tests.log" || echo 'did not finish') ($(($(date +%s) - start)) s, exit $status)"

# --- step times: pactrain and PyTorch eager, fp32 and TF32, one process per run ---
bench="$out/gpu_bench.jsonl"
: >"$bench"
"$python" "$root/bench/torch_gpu_step.py" --peak >>"$bench" 2>>"$out/bench.log"
for precision in fp32 tf32; do
  flag=()
  [ "$precision" = tf32 ] && flag=(--tf32)
  for model in resnet50 vit-base gpt2-small; do
    "$build/bench-gpu-step" --models "$model" --steps "$steps" "${flag[@]}" >>"$bench" 2>>"$out/bench.log" ||
      log "bench-gpu-step $model $precision failed (see bench.log)"
    "$python" "$root/bench/torch_gpu_step.py" --models "$model" --steps "$steps" "${flag[@]}" \
      >>"$bench" 2>>"$out/bench.log" || log "torch_gpu_step $model $precision failed"
  done
  # A pruned step (80% of every weight masked) against the dense one above.
  for model in resnet50 gpt2-small; do
    "$build/bench-gpu-step" --models "$model" --sparsity 0.8 --steps "$steps" "${flag[@]}" \
      >>"$bench" 2>>"$out/bench.log" || log "bench-gpu-step $model 80% $precision failed"
  done
done
"$python" "$root/bench/gpu_table.py" "$bench" | tee "$out/gpu_table.md"
exit $status
