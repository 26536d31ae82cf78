#include "core/generator.h"

#include <cmath>
#include <numbers>

#include "core/tensor.h"

namespace pac {

// splitmix64 spreads a small seed over the 256-bit state so that nearby seeds are unrelated.
void Generator::manual_seed(uint64_t seed) {
  for (auto& word : state_) {
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    word = z ^ (z >> 31);
  }
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Generator::next_u64() {
  uint64_t result = rotl(state_[1] * 5, 7) * 9;
  uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float Generator::uniform() {
  // The top 24 bits fill a float mantissa exactly, so every value is k / 2^24 < 1.
  return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f;
}

float Generator::normal() {
  // 1 - u lies in (0, 1], so the logarithm is finite.
  double u1 = 1.0 - static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

uint64_t Generator::below(uint64_t bound) {
  PAC_CHECK(bound > 0, "Generator::below: bound must be positive, got {}", bound);
  // Rejection of the short final interval removes modulo bias.
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % bound;
}

std::vector<int64_t> Generator::permutation(int64_t n) {
  PAC_CHECK(n >= 0, "Generator::permutation: n must be non-negative, got {}", n);
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[below(i + 1)]);
  return p;
}

Tensor Generator::randn(const Shape& shape, float mean, float std) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0, count = t.numel(); i < count; ++i) p[i] = mean + std * normal();
  return t;
}

Tensor Generator::rand(const Shape& shape, float low, float high) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0, count = t.numel(); i < count; ++i) p[i] = low + (high - low) * uniform();
  return t;
}

Tensor Generator::bernoulli(const Shape& shape, float p) {
  PAC_CHECK(p >= 0.0f && p <= 1.0f, "Generator::bernoulli: p must be in [0, 1], got {}", p);
  Tensor t = Tensor::empty(shape);
  float* out = t.data<float>();
  for (int64_t i = 0, count = t.numel(); i < count; ++i) out[i] = uniform() < p ? 1.0f : 0.0f;
  return t;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

}  // namespace pac
