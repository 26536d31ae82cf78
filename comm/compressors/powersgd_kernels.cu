#include <cmath>

#include "comm/compressors/powersgd_kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::comm::gpu {

namespace {

// One block: r is a handful (PowerSGD's rank), and each column's dot products need the whole
// column, so the block's threads share the rows and meet at every sum.
__global__ void orthogonalise_kernel(float* p, int64_t rows, int64_t r) {
  __shared__ float scratch[32];
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      float part = 0.0f;
      for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) part += p[i * r + j] * p[i * r + k];
      const float dot = cuda::block_sum(part, scratch);
      for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) p[i * r + j] -= dot * p[i * r + k];
      __syncthreads();
    }
    float part = 0.0f;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) part += p[i * r + j] * p[i * r + j];
    const float inv = 1.0f / (sqrtf(cuda::block_sum(part, scratch)) + 1e-8f);
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) p[i * r + j] *= inv;
    __syncthreads();
  }
}

}  // namespace

void orthogonalise_columns(float* p, int64_t rows, int64_t r) {
  if (rows == 0 || r == 0) return;
  orthogonalise_kernel<<<1, cuda::kThreads, 0, cuda::compute_stream()>>>(p, rows, r);
  PAC_CUDA_LAUNCH_CHECK();
}

}  // namespace pac::comm::gpu
