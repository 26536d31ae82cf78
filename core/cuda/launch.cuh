// Launch helpers shared by the .cu files: a grid-stride loop over n elements that takes a device
// lambda (nvcc --extended-lambda), and a block-wide sum. Internal to core/cuda.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pac::cuda {

constexpr int kThreads = 256;

template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    f(i);
  }
}

// Calls f(i) for every i in [0, n) on the compute stream.
template <class F>
void for_each(int64_t n, F f) {
  if (n <= 0) return;
  // Enough blocks to fill an H200 many times over; the grid-stride loop covers the rest.
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32);
  for_each_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, compute_stream()>>>(n, f);
  PAC_CUDA_LAUNCH_CHECK();
}

// Sum of v over the block; every thread gets the result. `scratch` holds 32 floats.
__device__ inline float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? scratch[lane] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

__device__ inline float block_max(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? scratch[lane] : -INFINITY;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2)
      v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace pac::cuda
