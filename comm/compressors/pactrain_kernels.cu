#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "comm/compressors/pactrain_kernels.h"
#include "comm/compressors/stochastic_level.h"
#include "core/cuda/launch.cuh"

namespace pac::comm::gpu {

using cuda::block_max;
using cuda::block_sum;
using cuda::compute_stream;
using cuda::for_each;

namespace {
__device__ inline int64_t at(const int32_t* positions, int64_t j) {
  return positions != nullptr ? positions[j] : j;
}
}  // namespace

void gather_scaled(const float* g, const int32_t* positions, int64_t k, float scale, void* out,
                   DType out_dtype) {
  switch (out_dtype) {
    case DType::f32: {
      auto* o = static_cast<float*>(out);
      return for_each(k, [=] __device__(int64_t j) { o[j] = g[at(positions, j)] * scale; });
    }
    case DType::bf16: {
      auto* o = static_cast<__nv_bfloat16*>(out);
      return for_each(k, [=] __device__(int64_t j) {
        o[j] = __float2bfloat16_rn(g[at(positions, j)] * scale);
      });
    }
    case DType::f16: {
      auto* o = static_cast<__half*>(out);
      return for_each(
          k, [=] __device__(int64_t j) { o[j] = __float2half_rn(g[at(positions, j)] * scale); });
    }
    default:
      PAC_FAIL("gather_scaled: {} is not a wire type (f32, bf16, f16)", dtype_name(out_dtype));
  }
}

namespace {

// The parameter that value j belongs to: begin is sorted, and there are few parameters.
__device__ inline int64_t parameter_of(const int64_t* begin, int64_t parameters, int64_t j) {
  int64_t lo = 0, hi = parameters - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (begin[mid] <= j)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A uniform number in [0, 1) for value j: SplitMix64 of (seed, j).
__device__ inline float uniform_at(uint64_t seed, int64_t j) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(j + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Block (c, p): chunk c of parameter p's values; e over them, then the chunk's maximum of |e|
// and sum of e^2 into partial[(p * chunks + c) * 2 + {0, 1}].
__global__ void ternary_prepare_kernel(const float* g, const int32_t* positions,
                                       const float* residual, float* e, const int64_t* begin,
                                       float* partial) {
  __shared__ float scratch[32];
  const int64_t p = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  const int64_t n = begin[p + 1] - begin[p], length = (n + chunks - 1) / chunks;
  const int64_t first = begin[p] + c * length, end = min(begin[p + 1], first + length);
  float m = 0.0f, squares = 0.0f;
  for (int64_t j = first + threadIdx.x; j < end; j += blockDim.x) {
    float v = g[at(positions, j)] + (residual != nullptr ? residual[j] : 0.0f);
    e[j] = v;
    m = fmaxf(m, fabsf(v));
    squares += v * v;
  }
  m = block_max(m, scratch);
  squares = block_sum(squares, scratch);
  if (threadIdx.x == 0) {
    partial[(p * chunks + c) * 2] = m;
    partial[(p * chunks + c) * 2 + 1] = squares;
  }
}

}  // namespace

int64_t ternary_prepare_chunks(int64_t largest) {
  // About 16k values a block, at most 64 blocks a parameter: a large layer fills the GPU, and the
  // combining pass stays short.
  return std::max<int64_t>(1, std::min<int64_t>(64, (largest + 16383) / 16384));
}

void ternary_prepare(const float* g, const int32_t* positions, const float* residual, float* e,
                     const int64_t* begin, int64_t parameters, int64_t chunks, float clip,
                     float* maxima, float* scratch) {
  if (parameters == 0) return;
  PAC_CHECK(parameters <= 65535 && chunks >= 1 && chunks <= 65535,
            "ternary_prepare: {} weights in {} chunks; a launch takes at most 65535 of each",
            parameters, chunks);
  dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(parameters));
  ternary_prepare_kernel<<<grid, 256, 0, compute_stream()>>>(g, positions, residual, e, begin,
                                                             scratch);
  PAC_CUDA_LAUNCH_CHECK();
  // One thread per parameter combines its chunks, always in the same order.
  for_each(parameters, [=] __device__(int64_t p) {
    float m = 0.0f, squares = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      m = fmaxf(m, scratch[(p * chunks + c) * 2]);
      squares += scratch[(p * chunks + c) * 2 + 1];
    }
    const int64_t n = begin[p + 1] - begin[p];
    maxima[p] = clip > 0.0f && n > 0 ? fminf(m, clip * sqrtf(squares / static_cast<float>(n))) : m;
  });
}

void ternary_encode(const float* e, const float* scale, const int64_t* begin, int64_t parameters,
                    int64_t k, uint64_t seed, float* residual, void* wire, TernaryLayout layout) {
  const int levels = layout.levels;
  auto code = [=] __device__(int64_t j) {
    float s = scale[parameter_of(begin, parameters, j)];
    float v = e[j];
    int t = stochastic_level(v, s, levels, uniform_at(seed, j));
    if (residual != nullptr)
      residual[j] = v - s / static_cast<float>(levels) * static_cast<float>(t);
    return t;
  };
  if (layout.bits == 0) {
    if (layout.dtype == DType::i8) {
      auto* w = static_cast<int8_t*>(wire);
      return for_each(k, [=] __device__(int64_t j) { w[j] = static_cast<int8_t>(code(j)); });
    }
    auto* w = static_cast<int16_t*>(wire);
    return for_each(k, [=] __device__(int64_t j) { w[j] = static_cast<int16_t>(code(j)); });
  }
  // One thread per word: its per_word values, t + levels in consecutive fields.
  auto* w = static_cast<int64_t*>(wire);
  int64_t words = (k + layout.per_word - 1) / layout.per_word;
  for_each(words, [=] __device__(int64_t i) {
    uint64_t word = 0;
    int64_t first = i * layout.per_word;
    for (int f = 0; f < layout.per_word && first + f < k; ++f) {
      word |= static_cast<uint64_t>(code(first + f) + levels) << (f * layout.bits);
    }
    w[i] = static_cast<int64_t>(word);
  });
}

void ternary_decode(const void* wire, TernaryLayout layout, int world, const float* scale,
                    const int64_t* begin, int64_t parameters, int64_t k, float* out,
                    const int32_t* positions) {
  for_each(k, [=] __device__(int64_t j) {
    int sum;
    if (layout.bits == 0) {
      sum = layout.dtype == DType::i8 ? static_cast<const int8_t*>(wire)[j]
                                      : static_cast<const int16_t*>(wire)[j];
    } else {
      uint64_t word = static_cast<uint64_t>(static_cast<const int64_t*>(wire)[j / layout.per_word]);
      int field = static_cast<int>(j % layout.per_word);
      sum = static_cast<int>((word >> (field * layout.bits)) & ((uint64_t(1) << layout.bits) - 1)) -
            world * layout.levels;
    }
    out[at(positions, j)] = scale[parameter_of(begin, parameters, j)] /
                            static_cast<float>(world * layout.levels) * static_cast<float>(sum);
  });
}

}  // namespace pac::comm::gpu
