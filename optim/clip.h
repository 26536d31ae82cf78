// Gradient-norm clipping, as torch.nn.utils.clip_grad_norm_: scales every gradient by
// max_norm / (total_norm + 1e-6) when the total L2 norm exceeds max_norm. Returns the norm.
#pragma once

#include "optim/optimizer.h"

namespace pac::optim {

float clip_grad_norm(const NamedParameters& params, float max_norm);

}  // namespace pac::optim
