// MultiHeadAttention: scaled dot-product self-attention over x [N, T, dim] with `heads` heads,
// parameterised as PyTorch's nn.MultiheadAttention (in_proj_weight [3 dim, dim], in_proj_bias,
// out_proj), so parameter counts and checkpoints line up. `causal` masks future positions.
#pragma once

#include "layers/linear.h"

namespace pac::nn {

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t dim, int64_t heads, bool causal = false);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  int64_t dim_, heads_;
  bool causal_;
};

}  // namespace pac::nn
