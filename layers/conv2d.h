// Conv2d: weight [out, in / groups, k, k], optional bias [out]; x [N, C, H, W].
#pragma once

#include "core/ops.h"
#include "layers/module.h"

namespace pac::nn {

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, int64_t groups = 1, int64_t dilation = 1);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr weight, bias;
  int64_t in_channels, out_channels, kernel;
  Conv2dOptions options;
};

}  // namespace pac::nn
