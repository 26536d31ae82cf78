// EF-signSGD's GPU kernels (signsgd_kernels.cu): the same message as the CPU loops in signsgd.cpp,
// [4-byte f32 scale | one sign bit per value, least significant bit first], built and read on
// the GPU, so a GPU bucket's all-gather overlaps backward like any other. Device pointers; queued
// on the compute stream.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace pac::comm::gpu {

#ifdef PAC_WITH_CUDA
// From p (the gradient plus residual, n values) and l1 = sum |p| (one float on the device): the
// message, with scale = l1 / n; with `residual` not null, residual = p - scale * sign(p).
void sign_pack(const float* p, const float* l1, int64_t n, uint8_t* message, float* residual);
// out[i] = the mean over the `world` messages of scale_r * sign_r(i); messages of
// `message_bytes` each, side by side.
void sign_unpack(const uint8_t* messages, int64_t message_bytes, int world, int64_t n, float* out);
#else
[[noreturn]] inline void sign_pack(const float*, const float*, int64_t, uint8_t*, float*) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
[[noreturn]] inline void sign_unpack(const uint8_t*, int64_t, int, int64_t, float*) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
#endif

}  // namespace pac::comm::gpu
