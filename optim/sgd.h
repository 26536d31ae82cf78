// SGD with momentum, dampening, Nesterov momentum and (L2) weight decay, exactly as PyTorch's
// torch.optim.SGD:  d = g + wd p;  b = m b + (1 - dampening) d (b = d on the first step);
// d = nesterov ? d + m b : b;  p -= lr d.
// With decay_momentum_only (for gradients that arrive with momentum already applied, as DGC's
// momentum correction sends them), the buffer carries the weight-decay term alone, as DGC's own
// optimizer (DGCSGD) does:  d = wd p;  b and d as above;  p -= lr (d + g).
#pragma once

#include "optim/optimizer.h"

namespace pac::optim {

struct SgdOptions {
  float lr = 0.1f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool decay_momentum_only = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(NamedParameters params, const SgdOptions& options);

 protected:
  void update(nn::Parameter& p, const GradientView& grad,
              std::map<std::string, Tensor>& slots) override;

 private:
  SgdOptions options_;
};

}  // namespace pac::optim
