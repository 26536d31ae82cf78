// MultiHeadAttention: scaled dot-product self-attention over x [N, T, dim] with `heads` heads,
// parameterised as PyTorch's nn.MultiheadAttention (in_proj_weight [3 dim, dim], in_proj_bias,
// out_proj), so parameter counts and checkpoints line up. `causal` masks future positions;
// `dropout` drops attention weights while training (nn.MultiheadAttention's dropout, nanoGPT's
// attn_dropout).
// For generation, forward_cached() keeps the keys and values of the tokens already seen, so each
// new token costs one token's projections and one row of attention.
#pragma once

#include "layers/linear.h"

namespace pac::nn {

struct AttentionCache {
  Tensor k, v;  // [N, heads, length, head dim] of the tokens seen so far; undefined when empty
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t dim, int64_t heads, bool causal = false, float dropout = 0.0f);
  Tensor forward(const Tensor& x) override;
  // x [N, T, dim]: the tokens after the cache's; their keys and values join the cache. Each
  // token attends to every cached one and (when causal) to the new ones up to itself.
  Tensor forward_cached(const Tensor& x, AttentionCache& cache);
  std::string describe() const override;

  ParameterPtr in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  // q [N, H, T, hd] against k, v [N, H, S, hd]; query t sits at position S - T + t.
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) const;

  int64_t dim_, heads_;
  bool causal_;
  float dropout_;
};

}  // namespace pac::nn
