// AdamW (Loshchilov & Hutter), exactly as torch.optim.AdamW: decoupled weight decay
// p *= 1 - lr wd, then Adam with bias-corrected moments:
// p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
#pragma once

#include "optim/optimizer.h"

namespace pac::optim {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  // false: 1-D parameters (biases, normalisation scales and shifts) are not decayed, as nanoGPT
  // groups them; true decays every parameter, as torch.optim.AdamW does with one group.
  bool decay_1d = true;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedParameters params, const AdamWOptions& options);

 protected:
  void update(nn::Parameter& p, const GradientView& grad,
              std::map<std::string, Tensor>& slots) override;

 private:
  AdamWOptions options_;
};

}  // namespace pac::optim
