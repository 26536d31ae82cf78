#include <cub/device/device_scan.cuh>

#include "comm/compressors/topk_kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::comm::gpu {

using cuda::compute_stream;
using cuda::for_each;
using cuda::kThreads;

namespace {

// |v| as bits: for non-negative floats the order of the bit patterns is the order of the values,
// so the k-th largest magnitude can be found digit by digit.
__device__ inline uint32_t magnitude_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// Where the radix select stands: the digits of the k-th largest magnitude found so far (`prefix`,
// under `mask`), and how many of the candidates that share them are still to be taken.
struct SelectState {
  uint32_t prefix, mask;
  long long remaining;
};

constexpr int kDigits = 256;  // 8 bits a pass, four passes

__global__ void select_start_kernel(SelectState* state, unsigned long long* histogram, int64_t k) {
  histogram[threadIdx.x] = 0;
  if (threadIdx.x == 0) *state = SelectState{0u, 0u, static_cast<long long>(k)};
}

// How many candidates that share the digits found so far have each value of the next digit.
__global__ void histogram_kernel(const float* acc, const int32_t* positions, int64_t m, int shift,
                                 const SelectState* state, unsigned long long* histogram) {
  __shared__ unsigned int local[kDigits];
  for (int d = threadIdx.x; d < kDigits; d += blockDim.x) local[d] = 0;
  __syncthreads();
  const uint32_t prefix = state->prefix, mask = state->mask;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += step) {
    const uint32_t key = magnitude_bits(acc[positions[j]]);
    if ((key & mask) == prefix) atomicAdd(&local[(key >> shift) & 0xffu], 1u);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kDigits; d += blockDim.x) {
    if (local[d] != 0) atomicAdd(&histogram[d], static_cast<unsigned long long>(local[d]));
  }
}

// The digit of the k-th largest: from the largest digit down, skip whole digits while they hold
// fewer candidates than are still to be taken. Clears the histogram for the next pass.
__global__ void choose_digit_kernel(SelectState* state, unsigned long long* histogram, int shift) {
  long long remaining = state->remaining;
  for (int d = kDigits - 1; d >= 0; --d) {
    const long long count = static_cast<long long>(histogram[d]);
    if (remaining <= count) {
      state->prefix |= static_cast<uint32_t>(d) << shift;
      state->mask |= 0xffu << shift;
      break;
    }
    remaining -= count;
  }
  state->remaining = remaining;
  for (int d = 0; d < kDigits; ++d) histogram[d] = 0;
}

int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t scan_scratch_bytes(int64_t m) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<int32_t*>(nullptr),
                                           static_cast<int32_t*>(nullptr), m, compute_stream()));
  return static_cast<int64_t>(bytes);
}

}  // namespace

void topk_accumulate(float* acc, int64_t n, const float* sum_squares, float limit, float* velocity,
                     float momentum, float* residual) {
  for_each(n, [=] __device__(int64_t i) {
    float a = acc[i];
    if (sum_squares != nullptr) {
      const float norm = sqrtf(*sum_squares);
      if (norm > limit) a *= limit / (norm + 1e-12f);
    }
    if (velocity != nullptr) a = velocity[i] = momentum * velocity[i] + a;
    a += residual[i];
    acc[i] = a;
    residual[i] = a;
  });
}

// Scratch: the histogram, the select state, a greater-than and an equal-to flag per candidate
// (scanned in place into output slots), and CUB's scan scratch.
int64_t topk_select_scratch_bytes(int64_t m) {
  return aligned(kDigits * sizeof(unsigned long long)) + aligned(sizeof(SelectState)) +
         2 * aligned(m * static_cast<int64_t>(sizeof(int32_t))) + aligned(scan_scratch_bytes(m));
}

void topk_select(const float* acc, const int32_t* positions, int64_t m, int64_t k, int32_t* chosen,
                 void* scratch) {
  PAC_CHECK(k >= 1 && k <= m, "topk_select: k={} must be in [1, {}]", k, m);
  auto* base = static_cast<char*>(scratch);
  auto* histogram = reinterpret_cast<unsigned long long*>(base);
  base += aligned(kDigits * sizeof(unsigned long long));
  auto* state = reinterpret_cast<SelectState*>(base);
  base += aligned(sizeof(SelectState));
  auto* greater = reinterpret_cast<int32_t*>(base);
  base += aligned(m * static_cast<int64_t>(sizeof(int32_t)));
  auto* equal = reinterpret_cast<int32_t*>(base);
  base += aligned(m * static_cast<int64_t>(sizeof(int32_t)));
  size_t scan_bytes = static_cast<size_t>(scan_scratch_bytes(m));

  cudaStream_t stream = compute_stream();
  select_start_kernel<<<1, kDigits, 0, stream>>>(state, histogram, k);
  PAC_CUDA_LAUNCH_CHECK();
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>((m + kThreads - 1) / kThreads, 132 * 8));
  for (int shift = 24; shift >= 0; shift -= 8) {
    histogram_kernel<<<blocks, kThreads, 0, stream>>>(acc, positions, m, shift, state, histogram);
    PAC_CUDA_LAUNCH_CHECK();
    choose_digit_kernel<<<1, 1, 0, stream>>>(state, histogram, shift);
    PAC_CUDA_LAUNCH_CHECK();
  }
  // Now state->prefix is the k-th largest magnitude T, and state->remaining how many of the
  // candidates equal to T are taken after all those above it.
  for_each(m, [=] __device__(int64_t j) {
    const uint32_t key = magnitude_bits(acc[positions[j]]), threshold = state->prefix;
    greater[j] = key > threshold;
    equal[j] = key == threshold;
  });
  CUDA_CHECK(cub::DeviceScan::ExclusiveSum(base, scan_bytes, greater, greater, m, stream));
  CUDA_CHECK(cub::DeviceScan::ExclusiveSum(base, scan_bytes, equal, equal, m, stream));
  for_each(m, [=] __device__(int64_t j) {
    const uint32_t key = magnitude_bits(acc[positions[j]]), threshold = state->prefix;
    const long long ties = state->remaining;
    if (key > threshold) {
      chosen[greater[j]] = positions[j];
    } else if (key == threshold && equal[j] < ties) {
      chosen[k - ties + equal[j]] = positions[j];
    }
  });
}

void topk_take(const float* acc, const int32_t* positions, int64_t count, float* values,
               float* residual, float* velocity) {
  for_each(count, [=] __device__(int64_t j) {
    const int32_t i = positions[j];
    values[j] = acc[i];
    residual[i] = 0.0f;
    if (velocity != nullptr) velocity[i] = 0.0f;  // momentum factor masking
  });
}

void topk_scatter_add(const float* values, const int32_t* indices, int64_t count, float share,
                      float* out) {
  for_each(count, [=] __device__(int64_t j) { out[indices[j]] += values[j] * share; });
}

void topk_scatter(const float* values, const int32_t* positions, int64_t count, float* out) {
  for_each(count, [=] __device__(int64_t j) { out[positions[j]] = values[j]; });
}

}  // namespace pac::comm::gpu
