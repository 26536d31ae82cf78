// Finite-difference gradient checks for every differentiable op, and a check that the checker
// itself rejects a wrong gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/vector_math.h"
#include "tests/gradcheck.h"

using namespace pac;
using pac::testing::gradcheck;

namespace {

Generator rng(7);

Tensor leaf(const Shape& shape, float low = -1.0f, float high = 1.0f) {
  return rng.rand(shape, low, high).requires_grad_();
}

// Values whose magnitude stays away from 0 (for log, sqrt, div, pow and kinks like relu's).
Tensor away_from_zero(const Shape& shape) {
  Tensor t = rng.rand(shape, 0.3f, 1.5f);
  Tensor sign = rng.bernoulli(shape, 0.5f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= sign.data<float>()[i] > 0 ? 1.0f : -1.0f;
  return t.requires_grad_();
}

// Distinct values at least 0.01 apart, so a finite-difference step never changes which
// element is the maximum (max and max-pooling have no derivative at ties).
Tensor distinct(const Shape& shape) {
  auto order = rng.permutation(shape_numel(shape));
  std::vector<float> values(order.size());
  for (size_t i = 0; i < order.size(); ++i) values[i] = 0.01f * static_cast<float>(order[i]) - 1.0f;
  return Tensor::from_vector(values, shape).requires_grad_();
}

void check(const pac::testing::Function& f, const std::vector<Tensor>& inputs) {
  auto result = gradcheck(f, inputs);
  INFO(result.report);
  CHECK(result.ok);
}

}  // namespace

TEST_CASE("gradcheck rejects a gradient with a missing factor") {
  // y = x^2 whose backward forgets the factor 2: the checker must notice.
  class WrongSquareBackward : public Node {
   public:
    explicit WrongSquareBackward(Tensor x) : x_(std::move(x)) {}
    std::string name() const override { return "WrongSquareBackward"; }
    std::vector<Tensor> apply(const Tensor& g) override { return {mul(g, x_)}; }
    Tensor x_;
  };
  auto wrong_square = [](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = mul(in[0], in[0]);
    }
    if (any_requires_grad({in[0]})) {
      attach_grad_fn(out, std::make_shared<WrongSquareBackward>(in[0].detach()), {in[0]});
    }
    return out;
  };
  auto result = gradcheck(wrong_square, {away_from_zero({5})});
  CHECK_FALSE(result.ok);
  CHECK(result.worst_error > 10.0);
  // The same function with the right rule passes.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); },
                  {away_from_zero({5})})
            .ok);
}

TEST_CASE("binary ops with broadcasting") {
  auto a = leaf({3, 1, 4});
  auto b = leaf({2, 4});
  check([](auto& in) { return add(in[0], in[1]); }, {a, b});
  check([](auto& in) { return sub(in[0], in[1]); }, {a, b});
  check([](auto& in) { return mul(in[0], in[1]); }, {a, b});
  check([](auto& in) { return div(in[0], in[1]); }, {a, away_from_zero({2, 4})});
  check([](auto& in) { return add(in[0], in[1]); }, {leaf({2, 3}), leaf({})});
  check([](auto& in) { return mul(in[0], in[1]); }, {leaf({4, 3}), leaf({3})});
  check([](auto& in) { return add_scalar(in[0], 2.5f); }, {leaf({4})});
  check([](auto& in) { return mul_scalar(in[0], -1.5f); }, {leaf({4})});
}

TEST_CASE("the vectorised exp and erf that GELU uses stay within their stated error") {
  double worst_exp = 0.0, worst_erf = 0.0;
  for (float x = -100.0f; x <= 0.0f; x += 0.0007f) {
    double want = std::exp(double(x));
    double got = vec::exp(x);
    // Relative where the result is a normal float; below that it must be 0 or tiny.
    worst_exp = std::max(worst_exp, want > 1.2e-38 ? std::abs(got - want) / want : got);
  }
  for (float x = -8.0f; x <= 8.0f; x += 0.0001f)
    worst_erf = std::max(worst_erf, std::abs(double(vec::erf(x)) - std::erf(double(x))));
  CHECK(worst_exp < 2.5e-7);
  CHECK(worst_erf < 5.5e-7);
  CHECK(vec::exp(-200.0f) == 0.0f);
  CHECK(vec::exp(0.0f) == 1.0f);
  CHECK(vec::erf(0.0f) == 0.0f);
  CHECK(vec::erf(-9.0f) == -1.0f);
}

TEST_CASE("unary ops") {
  check([](auto& in) { return neg(in[0]); }, {leaf({6})});
  check([](auto& in) { return exp(in[0]); }, {leaf({6})});
  check([](auto& in) { return log(in[0]); }, {leaf({6}, 0.5f, 2.0f)});
  check([](auto& in) { return sqrt(in[0]); }, {leaf({6}, 0.5f, 2.0f)});
  check([](auto& in) { return pow(in[0], 3.0f); }, {leaf({6})});
  check([](auto& in) { return pow(in[0], -0.5f); }, {leaf({6}, 0.5f, 2.0f)});
  check([](auto& in) { return relu(in[0]); }, {away_from_zero({8})});
  check([](auto& in) { return abs(in[0]); }, {away_from_zero({8})});
  check([](auto& in) { return gelu(in[0]); }, {leaf({8}, -3.0f, 3.0f)});
  check([](auto& in) { return gelu(in[0], GeluApproximation::tanh); }, {leaf({8}, -3.0f, 3.0f)});
  check([](auto& in) { return tanh(in[0]); }, {leaf({6})});
  check([](auto& in) { return sigmoid(in[0]); }, {leaf({6}, -3.0f, 3.0f)});
}

TEST_CASE("matmul: 2-D, folded leading dims, batched") {
  check([](auto& in) { return matmul(in[0], in[1]); }, {leaf({3, 4}), leaf({4, 5})});
  check([](auto& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 4}), leaf({4, 2})});
  check([](auto& in) { return matmul(in[0], in[1]); }, {leaf({2, 3, 4}), leaf({2, 4, 5})});
  check([](auto& in) { return linear(in[0], in[1], in[2]); },
        {leaf({2, 3, 4}), leaf({5, 4}), leaf({5})});
  check([](auto& in) { return linear(in[0], in[1], Tensor()); },
        {leaf({3, 4}), leaf({2, 4}), Tensor()});
}

TEST_CASE("reductions") {
  auto x = distinct({3, 4, 2});
  check([](auto& in) { return sum(in[0]); }, {x});
  check([](auto& in) { return sum(in[0], {1}); }, {x});
  check([](auto& in) { return sum(in[0], {0, 2}, true); }, {x});
  check([](auto& in) { return mean(in[0]); }, {x});
  check([](auto& in) { return mean(in[0], {-1}); }, {x});
  check([](auto& in) { return max(in[0]); }, {x});
  check([](auto& in) { return max(in[0], 1); }, {x});
  check([](auto& in) { return max(in[0], 0, true); }, {x});
}

TEST_CASE("softmax, log_softmax, cross_entropy") {
  auto x = leaf({3, 5, 2}, -2.0f, 2.0f);
  check([](auto& in) { return softmax(in[0], 1); }, {x});
  check([](auto& in) { return log_softmax(in[0], -1); }, {x});
  Tensor labels = Tensor::from_indices({0, 3, 4, 1}, {4});
  check([&](auto& in) { return cross_entropy(in[0], labels); }, {leaf({4, 5}, -2.0f, 2.0f)});
  check([&](auto& in) { return cross_entropy(in[0], labels, 0.2f); }, {leaf({4, 5}, -2.0f, 2.0f)});
}

// attention_softmax is the scaled, causally masked softmax in one pass: the same values and
// gradients as scaling, adding a -inf mask above the diagonal and taking softmax.
TEST_CASE("attention_softmax equals scale, mask and softmax, and its gradient checks") {
  auto x = leaf({2, 3, 4, 6}, -2.0f, 2.0f);  // 4 queries, 6 keys (2 cached positions first)
  check([](auto& in) { return attention_softmax(in[0], 0.5f, true); }, {x});
  check([](auto& in) { return attention_softmax(in[0], 0.5f, false); }, {x});
  Tensor mask = Tensor::zeros({4, 6});
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = i + 2 + 1; j < 6; ++j) mask.data<float>()[i * 6 + j] = -INFINITY;
  }
  Tensor a = x.detach().requires_grad_(), b = x.detach().requires_grad_();
  Tensor fused = attention_softmax(a, 0.5f, true);
  Tensor composed = softmax(add(mul_scalar(b, 0.5f), mask), -1);
  std::vector<float> want = composed.to_vector(), got = fused.to_vector();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
  Tensor upstream = Generator(4).randn({2, 3, 4, 6});
  sum(mul(fused, upstream)).backward();
  sum(mul(composed, upstream)).backward();
  std::vector<float> ga = a.grad().to_vector(), gb = b.grad().to_vector();
  for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == doctest::Approx(gb[i]).epsilon(1e-5));
  CHECK(got[3] == 0.0f);  // query 0 sees keys 0..2 only
  CHECK_THROWS_WITH(attention_softmax(Tensor::zeros({5, 4}), 1.0f, true),
                    doctest::Contains("at least as many keys as queries"));
}

TEST_CASE("shape ops") {
  check([](auto& in) { return reshape(in[0], {4, -1}); }, {leaf({2, 2, 3})});
  check([](auto& in) { return permute(in[0], {2, 0, 1}); }, {leaf({2, 3, 4})});
  check([](auto& in) { return transpose(in[0], 0, 1); }, {leaf({3, 5})});
  check([](auto& in) { return slice(in[0], 0, 1, 3); }, {leaf({4, 3})});
  check([](auto& in) { return slice(in[0], 1, 1, 4); }, {leaf({2, 5, 2})});
  check([](auto& in) { return cat({in[0], in[1]}, 1); }, {leaf({2, 3}), leaf({2, 2})});
  check([](auto& in) { return expand(in[0], {4, 2, 3}); }, {leaf({2, 1})});
  // A gradient flowing through two paths into one leaf is summed.
  check([](auto& in) { return add(slice(in[0], 0, 0, 2), slice(in[0], 0, 1, 3)); }, {leaf({3, 2})});
}

TEST_CASE("conv2d: stride, padding, dilation, groups, bias, with every algorithm") {
  std::vector<ConvAlgorithm> algorithms{ConvAlgorithm::im2col};
  if (dnnl_compiled()) algorithms.push_back(ConvAlgorithm::dnnl);
  ConvAlgorithm saved = conv_algorithm();
  for (ConvAlgorithm algorithm : algorithms) {
    CAPTURE(static_cast<int>(algorithm));
    set_conv_algorithm(algorithm);
    auto conv = [](Conv2dOptions o) {
      return [o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); };
    };
    check(conv(Conv2dOptions::square(1, 1)), {leaf({2, 3, 5, 5}), leaf({4, 3, 3, 3}), leaf({4})});
    check(conv(Conv2dOptions::square(2, 1)), {leaf({1, 2, 6, 5}), leaf({3, 2, 3, 3}), leaf({3})});
    check(conv(Conv2dOptions::square(1, 2, 2)), {leaf({1, 2, 6, 6}), leaf({2, 2, 3, 3}), Tensor()});
    check(conv(Conv2dOptions::square(1, 0, 1, 2)),
          {leaf({2, 4, 4, 4}), leaf({6, 2, 3, 3}), leaf({6})});
    check(conv(Conv2dOptions{}), {leaf({2, 3, 3, 3}), leaf({4, 3, 1, 1}), Tensor()});  // pointwise
    check(conv(Conv2dOptions{2, 1, 0, 1, 1, 1, 1}),
          {leaf({1, 2, 5, 4}), leaf({2, 2, 2, 3}), leaf({2})});
    // Only some inputs needing a gradient (a frozen weight, a constant input).
    check(conv(Conv2dOptions::square(1, 1)),
          {leaf({2, 3, 4, 4}), rng.rand({2, 3, 3, 3}), leaf({2})});
    check(conv(Conv2dOptions::square(1, 1)),
          {rng.rand({2, 3, 4, 4}), leaf({2, 3, 3, 3}), Tensor()});
  }
  set_conv_algorithm(saved);
}

TEST_CASE("pooling") {
  check([](auto& in) { return max_pool2d(in[0], 3, 2, 1); }, {distinct({2, 2, 7, 7})});
  check([](auto& in) { return max_pool2d(in[0], 2, 2); }, {distinct({1, 3, 4, 6})});
  check([](auto& in) { return avg_pool2d(in[0], 3, 2, 1); }, {leaf({2, 2, 5, 5})});
  check([](auto& in) { return avg_pool2d(in[0], 3, 2, 1, false); }, {leaf({1, 2, 5, 6})});
  check([](auto& in) { return adaptive_avg_pool2d(in[0], 3, 2); }, {leaf({2, 2, 7, 5})});
  check([](auto& in) { return adaptive_avg_pool2d(in[0], 1, 1); }, {leaf({2, 3, 4, 4})});
}

TEST_CASE("batch_norm in training and evaluation mode, layer_norm") {
  Tensor running_mean = Tensor::zeros({3}), running_var = Tensor::ones({3});
  check([&](auto& in) { return batch_norm(in[0], in[1], in[2], running_mean, running_var, true); },
        {leaf({4, 3, 2, 2}), leaf({3}), leaf({3})});
  check([&](auto& in) { return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true); },
        {leaf({5, 3}), leaf({3}), leaf({3})});
  Tensor rm = rng.rand({3}, -0.5f, 0.5f), rv = rng.rand({3}, 0.5f, 2.0f);
  check([&](auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, false); },
        {leaf({2, 3, 2, 2}), leaf({3}), leaf({3})});
  check([](auto& in) { return layer_norm(in[0], {6}, in[1], in[2]); },
        {leaf({2, 3, 6}), leaf({6}), leaf({6})});
  check([](auto& in) { return layer_norm(in[0], {2, 3}, Tensor(), Tensor()); }, {leaf({4, 2, 3})});
}

TEST_CASE("dropout and embedding") {
  check(
      [](auto& in) {
        Generator g(99);  // the same mask on every evaluation
        return dropout(in[0], 0.3f, true, g);
      },
      {leaf({20})});
  Tensor indices = Tensor::from_indices({1, 3, 1, 0, 4, 4}, {2, 3});
  check([&](auto& in) { return embedding(in[0], indices); }, {leaf({5, 4})});
}
