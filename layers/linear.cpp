#include "layers/linear.h"

#include "core/ops.h"
#include "layers/init.h"

namespace pac::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : in_(in_features), out_(out_features) {
  PAC_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got {} -> {}",
            in_features, out_features);
  Generator& g = default_generator();
  weight = register_parameter("weight", init::default_uniform({out_, in_}, in_, g));
  if (with_bias) bias = register_parameter("bias", init::default_uniform({out_}, in_, g));
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight->data(), bias ? bias->data() : Tensor());
}

std::string Linear::describe() const {
  return fmt::format("Linear({}, {}{})", in_, out_, bias ? "" : ", bias=false");
}

}  // namespace pac::nn
