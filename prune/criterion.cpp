#include "prune/criterion.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "prune/selection.h"

namespace pac::prune {

Tensor abs_product(const Tensor& a_any, const Tensor& b_any) {
  PAC_CHECK(a_any.shape() == b_any.shape(), "abs_product: {} and {} differ in shape", a_any.str(),
            b_any.str());
  Tensor a = a_any.cpu(), b = b_any.cpu();
  Tensor out = Tensor::empty(a.shape());
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = std::abs(pa[i] * pb[i]);
  return out;
}

Tensor abs_of(const Tensor& a_any) {
  Tensor a = a_any.cpu();
  Tensor out = Tensor::empty(a.shape());
  const float* pa = a.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = std::abs(pa[i]);
  return out;
}

std::vector<Tensor> copy_gradients(const NamedParameters& params) {
  std::vector<Tensor> out;
  for (const auto& [name, p] : params) {
    Tensor g = p->dense_grad();  // a copy already where the gradient is compact
    PAC_CHECK(g.defined(), "pruning: '{}' has no gradient after the gradient pass", name);
    out.push_back(g.is_cuda() ? g.cpu() : p->grad_is_compact() ? g : g.clone());
  }
  return out;
}

void keep_top(const double* scores, int64_t n, int64_t k, uint8_t* keep) {
  keep_top({ScoreSpan{nullptr, scores, n, nullptr}}, k, {keep});
}

void Criterion::load_state(const StateDict& state, const NamedParameters& params) {
  (void)params;
  StateReader("criterion " + name(), state).finish();  // a criterion that keeps nothing takes none
}

StateDict sums_to_state(const std::vector<Tensor>& sums) {
  StateDict out;
  for (size_t i = 0; i < sums.size(); ++i) out["sum." + std::to_string(i)] = sums[i];
  return out;
}

std::vector<Tensor> sums_from_state(StateReader& read, const NamedParameters& params) {
  std::vector<Tensor> sums;
  if (!read.has("sum.0")) return sums;
  for (size_t i = 0; i < params.size(); ++i)
    sums.push_back(read.tensor("sum." + std::to_string(i), params[i].second->shape()));
  return sums;
}

}  // namespace pac::prune
