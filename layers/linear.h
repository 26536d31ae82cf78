// Linear: y = x W^T + b over the last dimension; weight [out, in], bias [out].
#pragma once

#include "layers/module.h"

namespace pac::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr weight, bias;  // bias is null when disabled

 private:
  int64_t in_, out_;
};

}  // namespace pac::nn
