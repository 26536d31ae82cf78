#include "optim/update_kernels.h"

#include "core/cuda/launch.cuh"

namespace pac::optim::gpu {

using cuda::for_each;

void sgd_step(float* param, float* momentum_buf, const UpdateGrad& g, float lr, float momentum,
              float dampening, float weight_decay, bool nesterov, bool first_step,
              bool decay_momentum_only) {
  const float keep = 1.0f - dampening;
  for_each(g.count, [=] __device__(int64_t j) {
    int64_t i = g.positions != nullptr ? g.positions[j] : j;
    const float moved =
        decay_momentum_only ? weight_decay * param[i] : g.values[j] + weight_decay * param[i];
    const float unmoved = decay_momentum_only ? g.values[j] : 0.0f;
    if (momentum_buf == nullptr) {
      param[i] -= lr * (moved + unmoved);
      return;
    }
    float b = first_step ? moved : momentum * momentum_buf[j] + keep * moved;
    momentum_buf[j] = b;
    param[i] -= lr * ((nesterov ? moved + momentum * b : b) + unmoved);
  });
}

void adamw_step(float* param, float* exp_avg, float* exp_avg_sq, const UpdateGrad& g,
                float step_size, float sqrt_bias2, float beta1, float beta2, float eps,
                float decay) {
  for_each(g.count, [=] __device__(int64_t j) {
    int64_t i = g.positions != nullptr ? g.positions[j] : j;
    float grad = g.values[j];
    float w = param[i] * decay;
    float m = beta1 * exp_avg[j] + (1.0f - beta1) * grad;
    float v = beta2 * exp_avg_sq[j] + (1.0f - beta2) * grad * grad;
    exp_avg[j] = m;
    exp_avg_sq[j] = v;
    param[i] = w - step_size * m / (sqrtf(v) / sqrt_bias2 + eps);
  });
}

}  // namespace pac::optim::gpu
