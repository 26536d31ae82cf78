#include "layers/dropout.h"

#include "core/ops.h"

namespace pac::nn {

Dropout::Dropout(float p) : p_(p) {
  PAC_CHECK(p >= 0.0f && p < 1.0f, "Dropout: p must be in [0, 1), got {}", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), default_generator());
}

std::string Dropout::describe() const { return fmt::format("Dropout(p={})", p_); }

}  // namespace pac::nn
