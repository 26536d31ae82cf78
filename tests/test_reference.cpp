// Forward values and gradients against reference values computed once by PyTorch
// (tests/fixtures/make_fixtures.py wrote tests/fixtures/reference.txt).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "core/ops.h"
#include "tests/fixtures.h"

using namespace pac;
using pac::testing::fixture;

namespace {

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shape " << shape_str(got.shape())
                                                    << " vs " << shape_str(want.shape()));
  auto g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i) {
    double tolerance = 1e-4 + 1e-4 * std::abs(w[i]);
    REQUIRE_MESSAGE(std::abs(g[i] - w[i]) <= tolerance,
                    what << "[" << i << "]: got " << g[i] << ", PyTorch " << w[i]);
  }
}

// Runs fn on the case's inputs, backpropagates PyTorch's upstream gradient, and compares the
// output and the gradient of every input. A gradient missing from the fixture file is an error,
// not a skipped check.
void check_case(const std::string& name, int inputs,
                const std::function<Tensor(std::vector<Tensor>&)>& fn) {
  std::vector<Tensor> in;
  for (int i = 0; i < inputs; ++i)
    in.push_back(fixture(name + ".in" + std::to_string(i)).requires_grad_());
  Tensor out = fn(in);
  check_close(out, fixture(name + ".out"), name + ".out");
  out.backward(fixture(name + ".gout"));
  for (int i = 0; i < inputs; ++i) {
    std::string key = name + ".grad" + std::to_string(i);
    REQUIRE_MESSAGE(pac::testing::reference_tensors().count(key),
                    key << " is missing from tests/fixtures/reference.txt; regenerate it with "
                           "tests/fixtures/make_fixtures.py");
    check_close(in[i].grad(), fixture(key), key);
  }
}

}  // namespace

TEST_CASE("conv2d matches PyTorch, with every algorithm") {
  std::vector<ConvAlgorithm> algorithms{ConvAlgorithm::im2col};
  if (dnnl_compiled()) algorithms.push_back(ConvAlgorithm::dnnl);
  ConvAlgorithm saved = conv_algorithm();
  for (ConvAlgorithm algorithm : algorithms) {
    set_conv_algorithm(algorithm);
    check_case("conv_groups", 3, [](auto& in) {
      return conv2d(in[0], in[1], in[2], Conv2dOptions::square(2, 1, 1, 2));
    });
    check_case("conv_dilated", 2, [](auto& in) {
      return conv2d(in[0], in[1], Tensor(), Conv2dOptions::square(1, 2, 2));
    });
    check_case("conv_rect", 3, [](auto& in) {
      return conv2d(in[0], in[1], in[2], Conv2dOptions{2, 1, 0, 1, 1, 1, 1});
    });
  }
  set_conv_algorithm(saved);
}

TEST_CASE("batch_norm matches PyTorch, including the running statistics") {
  Tensor rm = fixture("bn_train.running_mean_before"), rv = fixture("bn_train.running_var_before");
  check_case("bn_train", 3,
             [&](auto& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1f, 1e-5f); });
  check_close(rm, fixture("bn_train.running_mean_after"), "running_mean");
  check_close(rv, fixture("bn_train.running_var_after"), "running_var");
  Tensor erm = fixture("bn_eval.running_mean"), erv = fixture("bn_eval.running_var");
  check_case("bn_eval", 3,
             [&](auto& in) { return batch_norm(in[0], in[1], in[2], erm, erv, false); });
}

TEST_CASE("layer_norm, gelu, softmax and cross_entropy match PyTorch") {
  check_case("layer_norm", 3, [](auto& in) { return layer_norm(in[0], {8}, in[1], in[2]); });
  check_case("gelu", 1, [](auto& in) { return gelu(in[0]); });
  check_case("gelu_tanh", 1, [](auto& in) { return gelu(in[0], GeluApproximation::tanh); });
  check_case("softmax", 1, [](auto& in) { return softmax(in[0], 1); });
  check_case("log_softmax", 1, [](auto& in) { return log_softmax(in[0], -1); });
  Tensor labels = fixture("cross_entropy.labels").to(DType::i64);
  check_case("cross_entropy", 1, [&](auto& in) { return cross_entropy(in[0], labels, 0.1f); });
  check_case("sigmoid_tanh", 1, [](auto& in) { return mul(sigmoid(in[0]), tanh(in[0])); });
}

TEST_CASE("pooling matches PyTorch") {
  check_case("max_pool", 1, [](auto& in) { return max_pool2d(in[0], 3, 2, 1); });
  check_case("avg_pool", 1, [](auto& in) { return avg_pool2d(in[0], 3, 2, 1); });
  check_case("avg_pool_nopad", 1, [](auto& in) { return avg_pool2d(in[0], 3, 2, 1, false); });
  check_case("adaptive_pool", 1, [](auto& in) { return adaptive_avg_pool2d(in[0], 3, 2); });
}

TEST_CASE("matmul and broadcasting match PyTorch") {
  check_case("bmm", 2, [](auto& in) { return matmul(in[0], in[1]); });
  check_case("linear", 2, [](auto& in) { return matmul(in[0], in[1]); });
  check_case("broadcast_div", 2, [](auto& in) { return div(in[0], in[1]); });
}
