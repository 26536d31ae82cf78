// Kernels shared by the parts above core: applying a pruning mask, and sums of squares or counts of
// non-finite values (clipping, the finiteness checks).
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::cuda {

void apply_mask(float* values, const uint8_t* mask, int64_t n) {
  for_each(n, [=] __device__(int64_t i) {
    if (mask[i] == 0) values[i] = 0.0f;
  });
}

namespace {
__global__ void statistic_kernel(Statistic kind, const float* values, int64_t n, float* result) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    float v = values[i];
    acc += kind == Statistic::sum_squares ? v * v : (isfinite(v) ? 0.0f : 1.0f);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(result, acc);
}
}  // namespace

void add_statistic(Statistic kind, const float* values, int64_t n, float* result) {
  if (n == 0) return;
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 4);
  statistic_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, compute_stream()>>>(kind, values,
                                                                                     n, result);
  PAC_CUDA_LAUNCH_CHECK();
}

}  // namespace pac::cuda
