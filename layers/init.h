// Parameter initialisations, as PyTorch defines them. All draw from a Generator.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace pac::nn::init {

// PyTorch's default for Linear and Conv2d weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// (kaiming_uniform_ with a = sqrt(5) works out to this bound).
Tensor default_uniform(const Shape& shape, int64_t fan_in, Generator& g);
// kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out), torchvision's ResNet.
Tensor kaiming_normal_fan_out(const Shape& shape, int64_t fan_out, Generator& g);
// N(0, std^2) truncated to [-2 std, 2 std] by redrawing, as trunc_normal_ for ViT embeddings.
Tensor trunc_normal(const Shape& shape, float std, Generator& g);

}  // namespace pac::nn::init
