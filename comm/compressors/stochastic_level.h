// One value's code under a scale, with stochastic rounding to L levels: shared by the CPU codec
// (ternary_codec.cpp) and its GPU twin (pactrain_kernels.cu), so that both code alike.
#pragma once

#if defined(__CUDACC__)
#define PAC_CODEC_FN __host__ __device__ inline
#else
#define PAC_CODEC_FN inline
#endif

namespace pac::comm {

// The code t in -levels..levels of value v under scale s, from one uniform number u in [0, 1):
// with x = levels |v| / s, |t| is floor(x) + 1 with probability x - floor(x), else floor(x), so
// that (s / levels) t has mean v. A value at or above the scale is sent as sign(v) levels (the
// rest is what error feedback carries); a zero scale, or a value that is not a number, sends 0.
// With one level this is TernGrad's t = sign(v) with probability |v| / s.
PAC_CODEC_FN int stochastic_level(float v, float s, int levels, float u) {
  if (!(s > 0.0f)) return 0;
  const float x = (v < 0.0f ? -v : v) / s * static_cast<float>(levels);
  int m = 0;
  if (x >= static_cast<float>(levels)) {
    m = levels;
  } else if (x >= 0.0f) {
    m = static_cast<int>(x);
    m += u < x - static_cast<float>(m);
  }
  return v > 0.0f ? m : -m;
}

}  // namespace pac::comm

#undef PAC_CODEC_FN
