#include "optim/adamw.h"

#include <cmath>

namespace pac::optim {

AdamW::AdamW(NamedParameters params, const AdamWOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  PAC_CHECK(options.beta1 >= 0.0f && options.beta1 < 1.0f && options.beta2 >= 0.0f &&
                options.beta2 < 1.0f,
            "adamw: betas must be in [0, 1), got {} and {}", options.beta1, options.beta2);
  PAC_CHECK(options.eps > 0.0f, "adamw: eps must be > 0, got {}", options.eps);
}

void AdamW::update(nn::Parameter& p, const GradientView& grad,
                   std::map<std::string, Tensor>& slots) {
  if (!slots.count("exp_avg")) {
    slots["exp_avg"] = Tensor::zeros(p.shape(), DType::f32, p.data().device());
    slots["exp_avg_sq"] = Tensor::zeros(p.shape(), DType::f32, p.data().device());
    slots["step"] = Tensor::zeros({1});  // a host counter, on every device
  }
  float* m = slots["exp_avg"].data<float>();
  float* v = slots["exp_avg_sq"].data<float>();
  float* t_slot = slots["step"].data<float>();
  float t = ++t_slot[0];
  const float b1 = options_.beta1, b2 = options_.beta2;
  const float bias1 = 1.0f - std::pow(b1, t), bias2 = 1.0f - std::pow(b2, t);
  const float step_size = lr_ / bias1, sqrt_bias2 = std::sqrt(bias2);
  const float decay = 1.0f - lr_ * options_.weight_decay;
  float* w = static_cast<float*>(p.data().raw_data());
  const float* g = grad.values;
  if (p.data().is_cuda()) {
    cuda::adamw_step(w, m, v, grad.for_kernel(), step_size, sqrt_bias2, b1, b2, options_.eps,
                     decay);
    return;
  }
  for (int64_t j = 0; j < grad.count; ++j) {
    int64_t i = grad.position(j);
    if (grad.pruned(i)) {
      w[i] = m[i] = v[i] = 0.0f;
      continue;
    }
    w[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g[j];
    v[i] = b2 * v[i] + (1.0f - b2) * g[j] * g[j];
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bias2 + options_.eps);
  }
}

}  // namespace pac::optim
