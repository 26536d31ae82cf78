#include "tests/gradcheck.h"

#include <cmath>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"

namespace pac::testing {

// L in double precision, so the finite differences see as little rounding as possible.
static double probe_loss(const Tensor& out, const Tensor& probe) {
  const float* po = out.data<float>();
  const float* pp = probe.data<float>();
  double total = 0.0;
  for (int64_t i = 0; i < out.numel(); ++i) total += static_cast<double>(po[i]) * pp[i];
  return total;
}

GradcheckResult gradcheck(const Function& f, const std::vector<Tensor>& inputs, float eps,
                          double atol, double rtol) {
  Generator generator(1234);
  Tensor out = f(inputs);
  Tensor probe = generator.randn(out.shape());
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) input.impl()->grad.reset();
  }
  out.backward(probe);

  GradcheckResult result;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& input = inputs[k];
    if (!input.defined() || !input.requires_grad()) continue;
    Tensor analytic = input.grad();
    if (!analytic.defined()) {
      return {false, INFINITY, fmt::format("input {} received no gradient", k)};
    }
    float* value = input.data<float>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      float saved = value[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        value[i] = saved + eps;
        plus = probe_loss(f(inputs), probe);
        value[i] = saved - eps;
        minus = probe_loss(f(inputs), probe);
        value[i] = saved;
      }
      double numeric = (plus - minus) / (2.0 * eps);
      double got = analytic.data<float>()[i];
      double error = std::abs(got - numeric) / (atol + rtol * std::abs(numeric));
      if (error > result.worst_error) {
        result.worst_error = error;
        result.report =
            fmt::format("input {} element {}: analytic {:.6g}, numeric {:.6g}", k, i, got, numeric);
      }
    }
  }
  result.ok = result.worst_error <= 1.0;
  return result;
}

}  // namespace pac::testing
