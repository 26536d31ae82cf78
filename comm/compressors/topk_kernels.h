// Top-k's GPU kernels (topk_kernels.cu): the same steps as the CPU loops in topk.cpp, on a bucket
// that lives on the GPU, so that a GPU bucket's all-gather overlaps backward like any other.
// The selection is a radix select on the bits of |value| (four passes of an 8-bit histogram
// find the k-th largest magnitude, nothing is sorted), then a stable compaction. Device
// pointers; queued on the compute stream; nothing waits for the GPU.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace pac::comm::gpu {

#ifdef PAC_WITH_CUDA
// acc = acc * c (c = min(1, limit / |acc|) when sum_squares is not null: clipping to norm
// `limit`, from the device's sum of acc^2), then with velocity not null u = momentum u + acc and
// acc = u (momentum correction), then acc += residual and residual = acc: everything is residual
// until it is sent.
void topk_accumulate(float* acc, int64_t n, const float* sum_squares, float limit, float* velocity,
                     float momentum, float* residual);

// Bytes of device scratch that topk_select needs for m candidates.
int64_t topk_select_scratch_bytes(int64_t m);
// Of the m candidates acc[positions[j]], the k (1 <= k <= m) of largest magnitude: their positions
// into chosen[0..k). The ones above the k-th largest magnitude come first, in candidate order,
// then as many of those equal to it as fill k, in candidate order.
void topk_select(const float* acc, const int32_t* positions, int64_t m, int64_t k, int32_t* chosen,
                 void* scratch);

// For j < count: values[j] = acc[positions[j]], and residual (and velocity, when not null) at
// positions[j] cleared: sent values are no longer owed.
void topk_take(const float* acc, const int32_t* positions, int64_t count, float* values,
               float* residual, float* velocity);

// out[indices[j]] += values[j] * share for j < count; the indices are distinct (one rank's).
void topk_scatter_add(const float* values, const int32_t* indices, int64_t count, float share,
                      float* out);
// out[positions[j]] = values[j] for j < count.
void topk_scatter(const float* values, const int32_t* positions, int64_t count, float* out);
#else
[[noreturn]] inline void topk_gpu_missing() {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
inline void topk_accumulate(float*, int64_t, const float*, float, float*, float, float*) {
  topk_gpu_missing();
}
inline int64_t topk_select_scratch_bytes(int64_t) { topk_gpu_missing(); }
inline void topk_select(const float*, const int32_t*, int64_t, int64_t, int32_t*, void*) {
  topk_gpu_missing();
}
inline void topk_take(const float*, const int32_t*, int64_t, float*, float*, float*) {
  topk_gpu_missing();
}
inline void topk_scatter_add(const float*, const int32_t*, int64_t, float, float*) {
  topk_gpu_missing();
}
inline void topk_scatter(const float*, const int32_t*, int64_t, float*) { topk_gpu_missing(); }
#endif

}  // namespace pac::comm::gpu
