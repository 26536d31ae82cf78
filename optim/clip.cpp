#include "optim/clip.h"

#include <cmath>

#include "core/autograd.h"
#include "core/cuda/kernels.h"
#include "core/ops.h"

namespace pac::optim {

float clip_grad_norm(const NamedParameters& params, float max_norm) {
  PAC_CHECK(max_norm > 0.0f, "clip_grad_norm: max_norm must be positive, got {}", max_norm);
  NoGradGuard no_grad;
  double total = 0.0;
  // Each gradient as the update reads it: compact for a pruned parameter, so pruned entries
  // never count. GPU gradients add their sums of squares into one device value, read once.
  Tensor device_total;
  for (const auto& [name, p] : params) {
    Tensor g = p->grad();
    if (!g.defined()) continue;
    if (g.is_cuda()) {
      if (!device_total.defined()) device_total = Tensor::zeros({1}, DType::f32, g.device());
      cuda::add_statistic(cuda::Statistic::sum_squares, g.data<float>(), g.numel(),
                          device_total.data<float>());
      continue;
    }
    const float* pg = g.data<float>();
    for (int64_t i = 0, count = g.numel(); i < count; ++i)
      total += static_cast<double>(pg[i]) * pg[i];
  }
  if (device_total.defined()) total += device_total.item();
  float norm = static_cast<float>(std::sqrt(total));
  float scale = max_norm / (norm + 1e-6f);
  if (scale < 1.0f) {
    for (const auto& [name, p] : params) {
      Tensor g = p->grad();
      if (g.defined()) scale_(g, scale);
    }
  }
  return norm;
}

}  // namespace pac::optim
