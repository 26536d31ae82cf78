// Half/bfloat16 conversions and the seeded generator.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/generator.h"
#include "core/tensor.h"

using namespace pac;

TEST_CASE("half conversion: exact values, rounding, subnormals, overflow, NaN") {
  CHECK(float_to_half(1.0f).bits == 0x3c00);
  CHECK(float_to_half(-2.0f).bits == 0xc000);
  CHECK(float_to_half(65504.0f).bits == 0x7bff);
  CHECK(float_to_half(1e6f).bits == 0x7c00);                    // overflow to infinity
  CHECK(float_to_half(5.960464477539063e-08f).bits == 0x0001);  // smallest subnormal
  CHECK(float_to_half(1.0f + 1.0f / 2048.0f).bits == 0x3c00);   // tie rounds to even
  CHECK(float_to_half(1.0f + 3.0f / 2048.0f).bits == 0x3c02);   // tie rounds to even (up)
  CHECK(std::isnan(half_to_float(float_to_half(NAN))));
  CHECK(half_to_float(Half{0x0001}) == doctest::Approx(5.960464477539063e-08));
  CHECK(half_to_float(Half{0x3555}) == doctest::Approx(0.333251953125));
  // Every half value survives a round trip through float.
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    Half h{static_cast<uint16_t>(bits)};
    REQUIRE(float_to_half(half_to_float(h)).bits == bits);
  }
}

TEST_CASE("bfloat16 conversion rounds to nearest even") {
  CHECK(float_to_bf16(1.0f).bits == 0x3f80);
  CHECK(bf16_to_float(float_to_bf16(3.140625f)) == 3.140625f);
  CHECK(float_to_bf16(1.0f + 1.0f / 256.0f).bits == 0x3f80);  // tie to even
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST_CASE("generator is reproducible and its state can be saved") {
  Generator a(42), b(42), c(43);
  CHECK(a.next_u64() == b.next_u64());
  CHECK(a.next_u64() != c.next_u64());
  Generator::State saved = a.state();
  float first = a.normal();
  a.set_state(saved);
  CHECK(a.normal() == first);
}

TEST_CASE("generator distributions have the right moments") {
  Generator g(5);
  Tensor n = g.randn({20000}, 1.0f, 2.0f);
  double mean = 0, sq = 0;
  for (float v : n.to_vector()) mean += v;
  mean /= n.numel();
  for (float v : n.to_vector()) sq += (v - mean) * (v - mean);
  CHECK(mean == doctest::Approx(1.0).epsilon(0.05));
  CHECK(std::sqrt(sq / n.numel()) == doctest::Approx(2.0).epsilon(0.03));
  Tensor u = g.rand({20000}, -1.0f, 3.0f);
  auto values = u.to_vector();
  CHECK(*std::min_element(values.begin(), values.end()) >= -1.0f);
  CHECK(*std::max_element(values.begin(), values.end()) < 3.0f);
  Tensor bern = g.bernoulli({20000}, 0.25f);
  double ones = 0;
  for (float v : bern.to_vector()) ones += v;
  CHECK(ones / 20000 == doctest::Approx(0.25).epsilon(0.05));
}

TEST_CASE("permutation contains every index exactly once") {
  Generator g(3);
  auto p = g.permutation(1000);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  CHECK(p != sorted);
}
