#!/usr/bin/env bash
# The one-command GPU check, for a machine with an NVIDIA GPU, the CUDA toolkit, CMake, ninja and
# PyTorch (python3): configure and build pactrain with CUDA for that GPU, run the tests labelled
# `gpu`, then time training steps of ResNet-50 (batch 64) and ViT-B/16 (batch 32) on synthetic
# 224x224 data and of GPT-2 small (batch 8 of 1024 tokens) for pactrain and for PyTorch eager on
# the same GPU, in fp32 and in TF32, and pactrain's ResNet-50 and GPT-2 steps with 80% of every
# weight masked against its dense ones, and print the tables. Everything it produces goes to $OUT (default out/gpu_check): the build and test logs,
# gpu_bench.jsonl and gpu_table.md (at most eight files, what a lent machine sends back).
#
# Missing -dev packages are taken from .deps/debs (fetched beforehand on a machine with apt by
# scripts/gpu_deps.sh) and unpacked into the private prefix .deps/root; nothing is installed
# into the system. cuDNN and NCCL are found under the toolkit or in PyTorch's nvidia/ wheels.
# --prebuilt DIR skips the build: DIR (or DIR.tar.gz) holds the programs (bin/) and the
# libraries they need (lib/), packed by scripts/gpu_pack.sh on a machine with the same CUDA major
# version; where they cannot start here (a library missing), the check builds as usual.
# Options: --arch SM (default: the GPU's, e.g. 90), --steps N (timed steps per run, default 30),
# --prebuilt DIR.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/out/gpu_check}"
build="${BUILD_DIR:-$root/build-gpu}"
prefix="$root/.deps/root"
arch="" steps=30 prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --prebuilt)
      # A packed archive is unpacked beside itself first.
      if [ -f "$2" ]; then
        tar -xzf "$2" -C "$(dirname "$2")" || exit 2
        set -- "$1" "${2%.tar.gz}" "${@:3}"
      fi
      prebuilt="$(cd "$2" && pwd)" || exit 2
      shift 2 ;;
    *) echo "gpu_check: unknown option '$1' (expected --arch SM, --steps N or --prebuilt DIR)" >&2
       exit 2 ;;
  esac
done
mkdir -p "$out"
log() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }
python=python3

log "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
log "PyTorch $("$python" -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())' 2>&1 | tail -1)"
if [ -z "$arch" ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  arch=${arch:-90}
fi

# --- packed programs: usable when every library they load is found ---
tests_bin="$build/tests/pactrain-gpu-tests" cli_bin="$build/pactrain" bench_bin="$build/bench-gpu-step"
if [ -n "$prebuilt" ]; then
  # CUDA's libraries where this machine keeps them: the toolkit, or PyTorch's nvidia wheels.
  cuda_dirs=""
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    found=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    [ -n "$found" ] && [[ ":$cuda_dirs:" != *":$(dirname "$found"):"* ]] &&
      cuda_dirs="$cuda_dirs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$prebuilt/lib$cuda_dirs:${LD_LIBRARY_PATH:-}"
  ldd "$prebuilt"/bin/* >"$out/ldd.txt" 2>&1
  # Binding every symbol at start shows a library older than the one the programs were built
  # with; 77 is the tests' answer where no GPU is visible, which still proves they load.
  LD_BIND_NOW=1 "$prebuilt/bin/pactrain-gpu-tests" --list-test-cases >/dev/null 2>>"$out/ldd.txt"
  probe=$?
  if grep -q "not found" "$out/ldd.txt" || { [ $probe -ne 0 ] && [ $probe -ne 77 ]; }; then
    log "packed programs cannot start here: $(grep -e 'not found' -e error "$out/ldd.txt" | sort -u | tr -s ' \t\n' ' '); building"
    prebuilt=""
  else
    tests_bin="$prebuilt/bin/pactrain-gpu-tests" cli_bin="$prebuilt/bin/pactrain"
    bench_bin="$prebuilt/bin/bench-gpu-step"
    log "packed programs from $prebuilt (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
  fi
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
if [ -z "$prebuilt" ] && ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAC_CUDA=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DPAC_MPI=OFF -DPAC_DNNL=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${cmake_deps[@]}" "${cuda_roots[@]}" &&
  cmake --build "$build" -j "$(nproc)" --target pactrain-gpu-tests pactrain-cli bench-gpu-step; \
  } >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  log "build FAILED (see build.log)"
  exit 1
fi
[ -z "$prebuilt" ] && log "build: $(($(date +%s) - start)) s for sm_$arch"

# --- the GPU tests: those `ctest -L gpu` runs in a build without MPI, called directly so that
# packed programs need no CTest files ---
start=$(date +%s)
status=0
: >"$out/gpu_tests.log"
run_test() {
  local name="$1"
  shift
  echo "=== $name: $*" >>"$out/gpu_tests.log"
  timeout 240 "$@" >>"$out/gpu_tests.log" 2>&1
  local rc=$?
  case $rc in
    0) log "test $name passed" ;;
    77) log "test $name SKIPPED (no GPU)"; status=1 ;;
    *) log "test $name FAILED (exit $rc, see gpu_tests.log)"; status=1 ;;
  esac
}
for part in ops training compressors; do
  run_test "gpu-$part" "$tests_bin" "--source-file=*test_cuda_$part.cpp"
done
run_test gpu-app-train "$root/tests/gpu_app_train.sh" "$cli_bin"
grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED" "$out/gpu_tests.log" | tail -15
log "gpu tests: $(($(date +%s) - start)) s, exit $status"

# --- step times: pactrain and PyTorch eager, fp32 and TF32, one process per run ---
bench="$out/gpu_bench.jsonl"
: >"$bench"
timeout 120 "$python" "$root/bench/torch_gpu_step.py" --peak >>"$bench" 2>>"$out/bench.log"
# The order is what matters most first (a check cut short by its time limit keeps what ran):
# the dense steps against PyTorch in fp32 and TF32, then the pruned steps against the dense ones.
precision_flags() { [ "$1" = tf32 ] && echo --tf32; }
for precision in fp32 tf32; do
  flag=($(precision_flags "$precision"))
  timeout 60 "$bench_bin" --models gemm --steps 10 "${flag[@]}" >>"$bench" 2>>"$out/bench.log" ||
    log "bench-gpu-step gemm $precision failed (see bench.log)"
  for model in resnet50 vit-base gpt2-small; do
    timeout 150 "$bench_bin" --models "$model" --steps "$steps" "${flag[@]}" >>"$bench" 2>>"$out/bench.log" ||
      log "bench-gpu-step $model $precision failed (see bench.log)"
    timeout 150 "$python" "$root/bench/torch_gpu_step.py" --models "$model" --steps "$steps" "${flag[@]}" \
      >>"$bench" 2>>"$out/bench.log" || log "torch_gpu_step $model $precision failed"
  done
done
# PyTorch's mixed precision (autocast bf16; fp16 with a GradScaler), with its peak memory: the
# peer that pactrain's --precision is to reach on the GPU.
for amp in bf16 fp16; do
  for model in resnet50 vit-base gpt2-small; do
    timeout 150 "$python" "$root/bench/torch_gpu_step.py" --models "$model" --steps "$steps" \
      --tf32 --amp "$amp" >>"$bench" 2>>"$out/bench.log" || log "torch_gpu_step $model $amp failed"
  done
done
# A pruned step (80% of every weight masked) against the dense one above.
for precision in fp32 tf32; do
  flag=($(precision_flags "$precision"))
  for model in resnet50 gpt2-small; do
    timeout 150 "$bench_bin" --models "$model" --sparsity 0.8 --steps "$steps" "${flag[@]}" \
      >>"$bench" 2>>"$out/bench.log" || log "bench-gpu-step $model 80% $precision failed"
  done
done
"$python" "$root/bench/gpu_table.py" "$bench" | tee "$out/gpu_table.md"
exit $status
