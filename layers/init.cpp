#include "layers/init.h"

#include <cmath>

namespace pac::nn::init {

Tensor default_uniform(const Shape& shape, int64_t fan_in, Generator& g) {
  float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
  return g.rand(shape, -bound, bound);
}

Tensor kaiming_normal_fan_out(const Shape& shape, int64_t fan_out, Generator& g) {
  return g.randn(shape, 0.0f, std::sqrt(2.0f / static_cast<float>(fan_out)));
}

Tensor trunc_normal(const Shape& shape, float std, Generator& g) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0, count = t.numel(); i < count; ++i) {
    float v;
    do v = g.normal();
    while (std::abs(v) > 2.0f);
    p[i] = v * std;
  }
  return t;
}

}  // namespace pac::nn::init
