#include "optim/finite.h"

#include <cmath>

namespace pac::optim {

std::string first_nonfinite_gradient(const NamedParameters& params) {
  for (const auto& [name, p] : params) {
    const bool compact = p->compact_grad().defined();
    Tensor g = compact ? p->compact_grad() : p->grad();
    if (!g.defined()) continue;
    const float* v = g.data<float>();
    const uint8_t* mask = p->has_mask() && !compact ? p->mask().data<uint8_t>() : nullptr;
    for (int64_t i = 0, n = g.numel(); i < n; ++i) {
      if (!std::isfinite(v[i]) && (!mask || mask[i])) return name;
    }
  }
  return "";
}

}  // namespace pac::optim
