#include "optim/adamw.h"

#include <cmath>

#include "core/ops/vector_math.h"
#include "optim/update_kernels.h"

namespace pac::optim {

namespace {

// The update, in the wide clones of vector_math.h where the CPU has them. Value j of the gradient
// and the state belongs to weight positions[j], or to weight j without a mask; both loops sit in
// the same clone, so a pruned parameter's kept entries round exactly as a dense one's do.
PAC_SIMD_CLONES void adamw_kernel(float* w, float* m, float* v, const float* g,
                                  const int32_t* positions, int64_t n, float step_size,
                                  float sqrt_bias2, float b1, float b2, float eps, float decay) {
  if (!positions) {
    for (int64_t j = 0; j < n; ++j) {
      w[j] *= decay;
      m[j] = b1 * m[j] + (1.0f - b1) * g[j];
      v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
      w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bias2 + eps);
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = positions[j];
    w[i] *= decay;
    m[j] = b1 * m[j] + (1.0f - b1) * g[j];
    v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
    w[i] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bias2 + eps);
  }
}

}  // namespace

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
    // Compact like the gradient: one value per kept entry.
    slots["exp_avg"] = Tensor::zeros({grad.count}, DType::f32, p.data().device());
    slots["exp_avg_sq"] = Tensor::zeros({grad.count}, DType::f32, p.data().device());
    slots["step"] = Tensor::zeros({1});  // a host counter, on every device
  }
  float* m = slots["exp_avg"].data<float>();
  float* v = slots["exp_avg_sq"].data<float>();
  float* t_slot = slots["step"].data<float>();
  float t = ++t_slot[0];
  const float b1 = options_.beta1, b2 = options_.beta2;
  const float bias1 = 1.0f - std::pow(b1, t), bias2 = 1.0f - std::pow(b2, t);
  const float step_size = lr_ / bias1, sqrt_bias2 = std::sqrt(bias2);
  const bool decayed = options_.decay_1d || p.shape().size() >= 2;
  const float decay = decayed ? 1.0f - lr_ * options_.weight_decay : 1.0f;
  float* w = static_cast<float*>(p.data().raw_data());
  const float* g = grad.values;
  if (p.data().is_cuda()) {
    gpu::adamw_step(w, m, v, {grad.values, grad.positions, grad.count}, step_size, sqrt_bias2, b1,
                    b2, options_.eps, decay);
    return;
  }
  adamw_kernel(w, m, v, g, grad.positions, grad.count, step_size, sqrt_bias2, b1, b2, options_.eps,
               decay);
}

}  // namespace pac::optim
