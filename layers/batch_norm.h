// BatchNorm2d: per-channel normalisation of [N, C, H, W] (or [N, C]) with learnable weight and
// bias and running statistics (buffers running_mean, running_var) used in evaluation.
#pragma once

#include "layers/module.h"

namespace pac::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr weight, bias;
  Tensor running_mean, running_var;

 private:
  int64_t channels_;
  float eps_, momentum_;
};

}  // namespace pac::nn
