// Unary elementwise ops. Each is one forward rule and one derivative rule, written side by side:
// y = f(x), and dy/dx as a function of x and y.
#include <cmath>
#include <numbers>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"
#include "core/ops/vector_math.h"
#include "core/saved_tensor.h"

namespace pac {

// What a derivative rule reads besides the incoming gradient. The node saves only that, so an
// activation that no rule reads is freed after forward: relu's input (what batch norm made) is
// not kept beside its output, which takes a third off a ResNet's saved activations.
enum class Reads { input, output };

template <class Derivative>
class UnaryBackward : public Node {
 public:
  UnaryBackward(const char* name, cuda::UnaryOp kind, float param, SavedTensor saved,
                Derivative derivative)
      : name_(name),
        kind_(kind),
        param_(param),
        saved_(std::move(saved)),
        derivative_(derivative) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor values = saved_.unpack();
    Tensor gx = detail::empty_on(values.shape(), values);
    // A rule takes (x, y) and ignores the one it does not read: the saved values stand in for
    // it, so the CPU loop and the GPU kernel keep their one form for every rule.
    const float* saved = values.data<float>();
    const float* px = saved;
    const float* py = saved;
    const float* pg = g.data<float>();
    float* out = gx.data<float>();
    if (gx.is_cuda()) {
      cuda::unary_backward(kind_, param_, px, py, pg, out, gx.numel());
      return {gx};
    }
    vec::map3(pg, px, py, out, gx.numel(),
              [d = derivative_](float g, float x, float y) { return g * d(x, y); });
    return {gx};
  }

 private:
  std::string name_;
  cuda::UnaryOp kind_;  // the same rule, for the GPU kernel
  float param_;
  // x or y, whichever the rule reads; detached: saving it creates no reference cycle.
  SavedTensor saved_;
  Derivative derivative_;
};

// `kind` and `param` name the same rule for the GPU (core/cuda/elementwise.cu), where the lambdas
// cannot go.
template <class Forward, class Derivative>
static Tensor unary_op(const Tensor& x, const char* name, cuda::UnaryOp kind, float param,
                       Reads reads, Forward forward, Derivative derivative) {
  detail::check_float(x, name, "x");
  Tensor y = detail::empty_on(x.shape(), x);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  if (x.is_cuda()) {
    cuda::unary_forward(kind, param, px, py, x.numel());
  } else {
    vec::map(px, py, x.numel(), forward);
  }
  if (any_requires_grad({x})) {
    SavedTensor saved(reads == Reads::input ? x : y);
    auto node = std::make_shared<UnaryBackward<Derivative>>(name, kind, param, std::move(saved),
                                                            derivative);
    detail::record(y, {x}, node);
  }
  return y;
}

Tensor neg(const Tensor& x) {
  return unary_op(
      x, "neg", cuda::UnaryOp::neg, 0.0f, Reads::output, [](float v) { return -v; },
      [](float, float) { return -1.0f; });
}

// |x|; its derivative is sign(x), 0 at 0 as PyTorch's.
Tensor abs(const Tensor& x) {
  return unary_op(
      x, "abs", cuda::UnaryOp::abs, 0.0f, Reads::input, [](float v) { return std::abs(v); },
      [](float v, float) { return vec::one_if(v > 0.0f) - vec::one_if(v < 0.0f); });
}

Tensor exp(const Tensor& x) {
  return unary_op(
      x, "exp", cuda::UnaryOp::exp, 0.0f, Reads::output, [](float v) { return std::exp(v); },
      [](float, float y) { return y; });
}

Tensor log(const Tensor& x) {
  return unary_op(
      x, "log", cuda::UnaryOp::log, 0.0f, Reads::input, [](float v) { return std::log(v); },
      [](float v, float) { return 1.0f / v; });
}

Tensor sqrt(const Tensor& x) {
  return unary_op(
      x, "sqrt", cuda::UnaryOp::sqrt, 0.0f, Reads::output, [](float v) { return std::sqrt(v); },
      [](float, float y) { return 0.5f / y; });
}

Tensor pow(const Tensor& x, float exponent) {
  return unary_op(
      x, "pow", cuda::UnaryOp::pow, exponent, Reads::input,
      [exponent](float v) { return std::pow(v, exponent); },
      [exponent](float v, float) { return exponent * std::pow(v, exponent - 1.0f); });
}

// relu's derivative reads the output (y > 0 exactly when x > 0); vec::one_if keeps its loop
// free of branches.
Tensor relu(const Tensor& x) {
  return unary_op(
      x, "relu", cuda::UnaryOp::relu, 0.0f, Reads::output,
      [](float v) { return v > 0.0f ? v : 0.0f; },
      [](float, float y) { return vec::one_if(y > 0.0f); });
}

Tensor tanh(const Tensor& x) {
  return unary_op(
      x, "tanh", cuda::UnaryOp::tanh, 0.0f, Reads::output, [](float v) { return std::tanh(v); },
      [](float, float y) { return 1.0f - y * y; });
}

Tensor sigmoid(const Tensor& x) {
  return unary_op(
      x, "sigmoid", cuda::UnaryOp::sigmoid, 0.0f, Reads::output,
      [](float v) { return 1.0f / (1.0f + std::exp(-v)); },
      [](float, float y) { return y * (1.0f - y); });
}

// GELU(x) = x * Phi(x). The tanh form approximates Phi(x) by 0.5 (1 + tanh(k (x + 0.044715 x^3)))
// with k = sqrt(2 / pi), as in PyTorch's approximate="tanh".
Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  constexpr float inv_sqrt2 = 0.70710678118654752f;
  constexpr float inv_sqrt_2pi = 0.39894228040143268f;
  constexpr float k = 0.79788456080286536f;  // sqrt(2 / pi)
  constexpr float c = 0.044715f;
  if (approximation == GeluApproximation::none) {
    return unary_op(
        x, "gelu", cuda::UnaryOp::gelu, 0.0f, Reads::input,
        [](float v) { return 0.5f * v * (1.0f + vec::erf(v * inv_sqrt2)); },
        [](float v, float) {
          float cdf = 0.5f * (1.0f + vec::erf(v * inv_sqrt2));
          float pdf = inv_sqrt_2pi * vec::exp(-0.5f * v * v);
          return cdf + v * pdf;
        });
  }
  return unary_op(
      x, "gelu_tanh", cuda::UnaryOp::gelu_tanh, 0.0f, Reads::input,
      [](float v) { return 0.5f * v * (1.0f + std::tanh(k * (v + c * v * v * v))); },
      [](float v, float) {
        float t = std::tanh(k * (v + c * v * v * v));
        float dinner = k * (1.0f + 3.0f * c * v * v);
        return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
      });
}

}  // namespace pac
