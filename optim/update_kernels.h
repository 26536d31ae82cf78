// The optimizers' GPU updates: one fused kernel per parameter, with the same arithmetic as the
// CPU loops in optim/sgd.cpp and optim/adamw.cpp. A gradient is `count` values, value j belonging
// to flat position positions[j] (or j when positions is null: a dense parameter); the state
// (momentum, moments) is indexed like the gradient, so a pruned parameter's state is compact too.
// All pointers are device pointers; the kernels are queued on the compute stream.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace pac::optim::gpu {

struct UpdateGrad {
  const float* values = nullptr;
  const int32_t* positions = nullptr;
  int64_t count = 0;
};

#ifdef PAC_WITH_CUDA
// momentum_buf null: plain SGD. Otherwise buf = d on the first step, else momentum * buf +
// (1 - dampening) d, with d = g + weight_decay * p; p -= lr * (Nesterov ? d + momentum buf : buf).
// With decay_momentum_only, d = weight_decay * p, and g is added to the step unmoved.
void sgd_step(float* param, float* momentum_buf, const UpdateGrad& grad, float lr, float momentum,
              float dampening, float weight_decay, bool nesterov, bool first_step,
              bool decay_momentum_only);
// p = p * decay - step_size * m / (sqrt(v) / sqrt_bias2 + eps) after the moment updates.
void adamw_step(float* param, float* exp_avg, float* exp_avg_sq, const UpdateGrad& grad,
                float step_size, float sqrt_bias2, float beta1, float beta2, float eps,
                float decay);
#else
// Never reached without CUDA: no parameter can be on a GPU there.
[[noreturn]] inline void sgd_step(float*, float*, const UpdateGrad&, float, float, float, float,
                                  bool, bool, bool) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
[[noreturn]] inline void adamw_step(float*, float*, float*, const UpdateGrad&, float, float, float,
                                    float, float, float) {
  PAC_FAIL("this build of pactrain has no CUDA backend (reconfigure with -DPAC_CUDA=ON)");
}
#endif

}  // namespace pac::optim::gpu
