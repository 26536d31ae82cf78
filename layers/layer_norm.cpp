#include "layers/layer_norm.h"

#include "core/ops.h"

namespace pac::nn {

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  PAC_CHECK(dim > 0, "LayerNorm: dim must be positive, got {}", dim);
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, {dim_}, weight->data(), bias->data(), eps_);
}

std::string LayerNorm::describe() const { return fmt::format("LayerNorm({})", dim_); }

}  // namespace pac::nn
