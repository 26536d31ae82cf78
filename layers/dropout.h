// Dropout with probability p in training mode, identity in evaluation. Masks are drawn from the
// default generator, so a seeded run is reproducible.
#pragma once

#include "layers/module.h"

namespace pac::nn {

class Dropout : public Module {
 public:
  explicit Dropout(float p);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  float p_;
};

}  // namespace pac::nn
