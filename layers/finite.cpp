#include "layers/finite.h"

#include <cmath>
#include <vector>

#include "core/cuda/kernels.h"

namespace pac::nn {

std::string first_nonfinite_gradient(
    const std::vector<std::pair<std::string, ParameterPtr>>& params) {
  // GPU gradients: one count per parameter in a device array, read with a single copy.
  std::vector<std::string> gpu_names;
  Tensor counts;
  for (const auto& [name, p] : params) {
    Tensor g = p->grad();  // compact for a pruned parameter: only entries that are applied
    if (!g.defined()) continue;
    const float* v = g.data<float>();
    if (g.is_cuda()) {
      if (!counts.defined()) {
        counts = Tensor::zeros({static_cast<int64_t>(params.size())}, DType::f32, g.device());
      }
      cuda::add_statistic(cuda::Statistic::nonfinite_count, v, g.numel(),
                          counts.data<float>() + gpu_names.size());
      gpu_names.push_back(name);
      continue;
    }
    for (int64_t i = 0, n = g.numel(); i < n; ++i) {
      if (!std::isfinite(v[i])) return name;
    }
  }
  if (counts.defined()) {
    std::vector<float> found = counts.to_vector();
    for (size_t i = 0; i < gpu_names.size(); ++i) {
      if (found[i] > 0.0f) return gpu_names[i];
    }
  }
  return "";
}

}  // namespace pac::nn
