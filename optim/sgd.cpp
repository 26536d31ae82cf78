#include "optim/sgd.h"

namespace pac::optim {

Sgd::Sgd(NamedParameters params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  PAC_CHECK(options.momentum >= 0.0f && options.weight_decay >= 0.0f,
            "sgd: momentum and weight decay must be >= 0, got {} and {}", options.momentum,
            options.weight_decay);
  PAC_CHECK(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
            "sgd: Nesterov momentum needs momentum > 0 and dampening 0");
}

void Sgd::update(nn::Parameter& p, const GradientView& grad, std::map<std::string, Tensor>& slots) {
  const float lr = lr_, m = options_.momentum, wd = options_.weight_decay;
  const float keep = 1.0f - options_.dampening;
  float* w = static_cast<float*>(p.data().raw_data());
  const float* g = grad.values;
  if (p.data().is_cuda()) {
    bool first = m != 0.0f && !slots.count("momentum_buffer");
    if (first) slots["momentum_buffer"] = Tensor::zeros(p.shape(), DType::f32, p.data().device());
    float* b = m != 0.0f ? slots["momentum_buffer"].data<float>() : nullptr;
    cuda::sgd_step(w, b, grad.for_kernel(), lr, m, options_.dampening, wd, options_.nesterov,
                   first);
    return;
  }
  if (m == 0.0f) {
    for (int64_t j = 0; j < grad.count; ++j) {
      int64_t i = grad.position(j);
      w[i] = grad.pruned(i) ? 0.0f : w[i] - lr * (g[j] + wd * w[i]);
    }
    return;
  }
  bool first = !slots.count("momentum_buffer");
  if (first) slots["momentum_buffer"] = Tensor::zeros(p.shape());
  float* b = slots["momentum_buffer"].data<float>();
  for (int64_t j = 0; j < grad.count; ++j) {
    int64_t i = grad.position(j);
    if (grad.pruned(i)) {
      w[i] = 0.0f;
      b[i] = 0.0f;
      continue;
    }
    float d = g[j] + wd * w[i];
    b[i] = first ? d : m * b[i] + keep * d;
    w[i] -= lr * (options_.nesterov ? d + m * b[i] : b[i]);
  }
}

}  // namespace pac::optim
