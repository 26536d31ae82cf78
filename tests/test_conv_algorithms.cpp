// The oneDNN convolution against the im2col + GEMM reference on ResNet-like shapes: forward
// output and all three gradients.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops.h"

using namespace pac;

namespace {

struct Result {
  Tensor y, gx, gw, gb;
};

Result run(ConvAlgorithm algorithm, const Tensor& x0, const Tensor& w0, const Tensor& b0,
           const Tensor& gy, const Conv2dOptions& o) {
  set_conv_algorithm(algorithm);
  Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  Tensor b = b0.clone().requires_grad_();
  Tensor y = conv2d(x, w, b, o);
  y.backward(gy);
  return {y, x.grad(), w.grad(), b.grad()};
}

void check_close(const Tensor& a, const Tensor& b, const char* what) {
  REQUIRE(a.shape() == b.shape());
  auto va = a.to_vector(), vb = b.to_vector();
  double scale = 0.0;
  for (float v : vb) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (size_t i = 0; i < va.size(); ++i) {
    REQUIRE_MESSAGE(std::abs(va[i] - vb[i]) <= 1e-4 * (1.0 + scale),
                    what << "[" << i << "]: dnnl " << va[i] << ", im2col " << vb[i]);
  }
}

}  // namespace

TEST_CASE("oneDNN convolution agrees with the im2col reference") {
  if (!dnnl_compiled()) {
    CHECK_THROWS_AS(set_conv_algorithm(ConvAlgorithm::dnnl), Error);
    return;
  }
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  std::vector<Case> cases = {
      {{8, 16, 14, 14}, {32, 16, 3, 3}, Conv2dOptions::square(1, 1)},
      {{4, 16, 15, 13}, {24, 16, 3, 3}, Conv2dOptions::square(2, 1)},
      {{4, 16, 8, 8}, {64, 16, 1, 1}, Conv2dOptions{}},
      {{2, 3, 28, 28}, {16, 3, 7, 7}, Conv2dOptions::square(2, 3)},
      {{2, 8, 9, 9}, {8, 2, 3, 3}, Conv2dOptions::square(1, 2, 2, 4)},
  };
  Generator g(11);
  ConvAlgorithm saved = conv_algorithm();
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    Tensor x = g.randn(c.x), w = g.randn(c.w, 0.0f, 0.1f), b = g.randn({c.w[0]});
    Tensor probe;
    {
      set_conv_algorithm(ConvAlgorithm::im2col);
      probe = g.randn(conv2d(x, w, b, c.o).shape());
    }
    Result ref = run(ConvAlgorithm::im2col, x, w, b, probe, c.o);
    Result got = run(ConvAlgorithm::dnnl, x, w, b, probe, c.o);
    check_close(got.y, ref.y, "output");
    check_close(got.gx, ref.gx, "grad input");
    check_close(got.gw, ref.gw, "grad weight");
    check_close(got.gb, ref.gb, "grad bias");
  }
  set_conv_algorithm(saved);
}
