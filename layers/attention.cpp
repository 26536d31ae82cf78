#include "layers/attention.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/init.h"

namespace pac::nn {

MultiHeadAttention::MultiHeadAttention(int64_t dim, int64_t heads, bool causal, float dropout)
    : dim_(dim), heads_(heads), causal_(causal), dropout_(dropout) {
  PAC_CHECK(dim > 0 && heads > 0 && dim % heads == 0,
            "MultiHeadAttention: dim {} must be a positive multiple of heads {}", dim, heads);
  PAC_CHECK(dropout >= 0.0f && dropout < 1.0f,
            "MultiHeadAttention: dropout must be in [0, 1), got {}", dropout);
  // Xavier-uniform in-projection and zero biases, as nn.MultiheadAttention initialises them.
  float bound = std::sqrt(6.0f / static_cast<float>(dim + 3 * dim));
  in_proj_weight =
      register_parameter("in_proj_weight", default_generator().rand({3 * dim, dim}, -bound, bound));
  in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(dim, dim));
  NoGradGuard no_grad;
  Tensor out_bias = out_proj->bias->data();
  out_bias.zero_();
}

Tensor MultiHeadAttention::forward(const Tensor& x) {
  AttentionCache none;
  return forward_cached(x, none);
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, AttentionCache& cache) {
  PAC_CHECK(x.dim() == 3 && x.size(2) == dim_,
            "MultiHeadAttention: input must be [N, T, {}], got {}", dim_, x.str());
  int64_t n = x.size(0), t = x.size(1), hd = dim_ / heads_;
  PAC_CHECK(cache.length() == 0 || cache.k.size(0) == n,
            "MultiHeadAttention: the cache holds {} sequences, the input {}", cache.k.size(0), n);
  Tensor qkv = linear(x, in_proj_weight->data(), in_proj_bias->data());  // [N, T, 3 dim]
  qkv = permute(reshape(qkv, {n, t, 3, heads_, hd}), {2, 0, 3, 1, 4});   // [3, N, H, T, hd]
  Tensor q = reshape(slice(qkv, 0, 0, 1), {n, heads_, t, hd});
  Tensor k = reshape(slice(qkv, 0, 1, 2), {n, heads_, t, hd});
  Tensor v = reshape(slice(qkv, 0, 2, 3), {n, heads_, t, hd});
  if (cache.length() > 0) {
    k = cat({cache.k, k}, 2);  // [N, H, S, hd]
    v = cat({cache.v, v}, 2);
  }
  Tensor out = attend(q, k, v);                             // [N, H, T, hd]
  out = reshape(permute(out, {0, 2, 1, 3}), {n, t, dim_});  // [N, T, dim]
  cache.k = k.detach();
  cache.v = v.detach();
  return (*out_proj)(out);
}

Tensor MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v) const {
  const int64_t t = q.size(2), hd = q.size(3);
  // Scaled by 1/sqrt(hd); causal: query i (the cache's S - T positions come first) sees keys up to
  // its own position, and no later ones.
  Tensor scores = matmul(q, transpose(k, -2, -1));  // [N, H, T, S]
  Tensor weights = dropout(attention_softmax(scores, 1.0f / std::sqrt(float(hd)), causal_ && t > 1),
                           dropout_, is_training(), default_generator());
  return matmul(weights, v);
}

std::string MultiHeadAttention::describe() const {
  return fmt::format("MultiHeadAttention(dim={}, heads={}{}{})", dim_, heads_,
                     causal_ ? ", causal" : "",
                     dropout_ > 0.0f ? fmt::format(", dropout={}", dropout_) : "");
}

}  // namespace pac::nn
