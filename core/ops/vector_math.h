// exp and erf in plain float arithmetic, without branches or library calls, so that a loop over a
// tensor calling them vectorises (glibc's expf and erff are scalar calls; GELU spent most of its
// time in them). exp is within 2.4e-7 relative (2 units in the last place) for x <= 0, erf within
// 5.2e-7 absolute (checked against double precision over [-8, 8] in tests/test_gradients.cpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// Loops marked PAC_SIMD_CLONES are compiled twice, for x86-64-v3 (AVX2 and FMA: 8 floats at a
// time) and for the baseline the build targets, and the loader picks the one this CPU runs
// (GCC's target_clones): a portable binary still gets the wide loops, as PyTorch's CPU kernels
// do with their own dispatch. Elsewhere the macro is empty, and so it is under ThreadSanitizer,
// whose instrumented ifunc resolvers would run before its runtime is up and crash at start.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define PAC_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PAC_SIMD_CLONES
#endif

namespace pac::vec {

// e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2) / 2; e^r by its Taylor series to r^6
// (truncation below 1.2e-7 relative). Results below the smallest normal float are 0, and above
// 2^127 stop at about 3e38 (the callers here pass x <= 0). The limits are applied to n as an
// integer: a float compare-and-select before the arithmetic keeps GCC from vectorising the loop.
inline float exp(float x) {
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in float arithmetic.
  const float round = 12582912.0f;
  float n = (x * 1.44269504088896341f + round) - round;
  // ln 2 in two parts, the first exact in float, so x - n ln 2 loses nothing.
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t exponent = static_cast<int32_t>(n);
  int32_t keep = exponent >= -126 ? -1 : 0;  // all bits, or none: underflow to 0
  exponent = exponent < -126 ? -126 : exponent;
  exponent = exponent > 127 ? 127 : exponent;
  float y = p * std::bit_cast<float>((exponent + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<int32_t>(y) & keep);
}

// Abramowitz and Stegun 7.1.26: erf(x) = 1 - t (a1 + t (a2 + ... + t a5)) e^(-x^2) with
// t = 1 / (1 + p x) for x >= 0; odd in x. The formula's own error is 1.5e-7; evaluated in float,
// up to 5.2e-7 near 0, where 1 - (about 1) cancels.
inline float erf(float x) {
  float a = std::fabs(x);
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  float y = 1.0f - poly * t * vec::exp(-a * a);
  return std::copysign(y, x);
}

// 1.0f where `condition` holds, else 0.0f, made from bits. `condition ? 1.0f : 0.0f` (or a
// cast of the bool) times a gradient is folded by GCC into a branch around the multiply, which it
// may not speculate for floats: the loop then does not vectorise, and a branch on the sign of
// activations mispredicts half the time (relu's backward took 16-22% of a ResNet-20 step).
inline float one_if(bool condition) {
  return std::bit_cast<float>(-static_cast<int32_t>(condition) & std::bit_cast<int32_t>(1.0f));
}

// y[i] = f(x[i]), out[i] = f(a[i], b[i]) and out[i] = f(a[i], b[i], c[i]), in the wide clones
// where the CPU has them.
template <class F>
PAC_SIMD_CLONES void map(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <class F>
PAC_SIMD_CLONES void map2(const float* a, const float* b, float* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
template <class F>
PAC_SIMD_CLONES void map3(const float* a, const float* b, const float* c, float* out, int64_t n,
                          F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i], c[i]);
}

// Sums of f(a[i], b[i]) over i, for reductions (batch norm's statistics and their gradients).
// A float loop `total += v` cannot vectorise: each addition waits for the one before, and the
// compiler may not reorder them. Eight running sums, one per lane, can: a sum a few times faster,
// rounded a little differently (and no less accurately) than the sequential one.
template <class F>
PAC_SIMD_CLONES float sum(const float* a, const float* b, int64_t n, F f) {
  constexpr int kLanes = 8;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += f(a[i + j], b[i + j]);
  }
  float total = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
                ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
  for (; i < n; ++i) total += f(a[i], b[i]);
  return total;
}
template <class F>
float sum(const float* x, int64_t n, F f) {
  return sum(x, x, n, [f](float v, float) { return f(v); });
}

}  // namespace pac::vec
