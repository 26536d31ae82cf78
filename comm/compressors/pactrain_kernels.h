// The PacTrain compressor's GPU kernels (pactrain_kernels.cu): the scaled conversion into a 16-bit
// wire, and the ternary coding with its packed wire format, the same arithmetic as the CPU loops
// in pactrain.cpp. Device pointers; queued on the compute stream. `positions` (i32, bucket
// positions) may be null where value j is at position j.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace pac::comm::gpu {

// How ternary sums travel (comm::TernaryWire): `bits` wide fields, `per_word` to an int64 word,
// or (bits 0) one i8/i16 per value; codes in -levels..levels.
struct TernaryLayout {
  int bits = 0, per_word = 1;
  DType dtype = DType::i8;
  int levels = 1;
};

#ifdef PAC_WITH_CUDA
// out[j] = g[positions[j]] * scale in `out_dtype` (f32, bf16 or f16).
void gather_scaled(const float* g, const int32_t* positions, int64_t k, float scale, void* out,
                   DType out_dtype);
// e[j] = g[positions[j]] (+ residual[j] when residual is not null), and per parameter p (values
// begin[p] .. begin[p + 1]) maxima[p] = max |e| over its values, or, with clip > 0, at most
// clip * (root mean square of its e). Each parameter is split into ternary_prepare_chunks(its
// largest count) blocks, whose partial maxima and sums of squares go to `scratch` (2 floats per
// parameter and chunk) and are combined in a fixed order, so the result does not depend on
// timing.
int64_t ternary_prepare_chunks(int64_t largest);
void ternary_prepare(const float* g, const int32_t* positions, const float* residual, float* e,
                     const int64_t* begin, int64_t parameters, int64_t chunks, float clip,
                     float* maxima, float* scratch);
// Codes t = stochastic_level(e, scale[p], levels, u) (stochastic_level.h; u a counter-based hash
// of (seed, j)), writes t + levels into the wire, and residual[j] = e[j] - scale[p] / levels * t
// when residual is not null.
void ternary_encode(const float* e, const float* scale, const int64_t* begin, int64_t parameters,
                    int64_t k, uint64_t seed, float* residual, void* wire, TernaryLayout layout);
// out[positions[j]] = scale[p] / (levels world) * (sum over ranks of t at j), from the reduced
// wire.
void ternary_decode(const void* wire, TernaryLayout layout, int world, const float* scale,
                    const int64_t* begin, int64_t parameters, int64_t k, float* out,
                    const int32_t* positions);
#else
// Never reached without CUDA: no bucket can be on a GPU there.
[[noreturn]] inline void no_cuda() {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
[[noreturn]] inline void gather_scaled(const float*, const int32_t*, int64_t, float, void*, DType) {
  no_cuda();
}
inline int64_t ternary_prepare_chunks(int64_t) { return 1; }
[[noreturn]] inline void ternary_prepare(const float*, const int32_t*, const float*, float*,
                                         const int64_t*, int64_t, int64_t, float, float*, float*) {
  no_cuda();
}
[[noreturn]] inline void ternary_encode(const float*, const float*, const int64_t*, int64_t,
                                        int64_t, uint64_t, float*, void*, TernaryLayout) {
  no_cuda();
}
[[noreturn]] inline void ternary_decode(const void*, TernaryLayout, int, const float*,
                                        const int64_t*, int64_t, int64_t, float*, const int32_t*) {
  no_cuda();
}
#endif

}  // namespace pac::comm::gpu
