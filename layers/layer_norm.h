// LayerNorm over the last dimension, with learnable weight and bias [dim].
#pragma once

#include "layers/module.h"

namespace pac::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr weight, bias;

 private:
  int64_t dim_;
  float eps_;
};

}  // namespace pac::nn
