#include "layers/batch_norm.h"

#include "core/ops.h"

namespace pac::nn {

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  PAC_CHECK(channels > 0, "BatchNorm2d: channels must be positive, got {}", channels);
  weight = register_parameter("weight", Tensor::ones({channels}));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = Tensor::zeros({channels});
  running_var = Tensor::ones({channels});
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  return batch_norm(x, weight->data(), bias->data(), running_mean, running_var, is_training(),
                    momentum_, eps_);
}

std::string BatchNorm2d::describe() const { return fmt::format("BatchNorm2d({})", channels_); }

}  // namespace pac::nn
