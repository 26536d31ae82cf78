// MLP: the transformer feed-forward block, Linear(dim, hidden) - GELU - Dropout -
// Linear(hidden, dim) - Dropout.
#pragma once

#include "layers/dropout.h"
#include "layers/linear.h"

namespace pac::nn {

class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, float dropout = 0.0f);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  std::shared_ptr<Linear> fc1, fc2;

 private:
  std::shared_ptr<Dropout> drop_;
};

}  // namespace pac::nn
