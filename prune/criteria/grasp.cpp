// grasp (Wang et al. 2020, "Picking winning tickets before training by preserving gradient
// flow"): GraSP removes the weights whose removal least reduces the gradient flow g^T g, i.e. the
// largest -w * (H g), with g the loss gradient and H the Hessian. Here keep-score = w * (H g).
//
// H g is a Hessian-vector product, computed here by a finite difference of two gradient passes
// on the same batch instead of double backward:
//   H g ~ (grad L(w + h u) - grad L(w)) * |g| / h,  u = g / |g|,  h = 1e-3 * |w|
// (norms over the prunable weights, which are also the only ones perturbed). The step is relative
// to the weights' size so that the difference stays well above float32 rounding. Also unlike the
// paper, the logits are not divided by a temperature. The weights are restored exactly afterwards.
#include <cmath>
#include <cstring>

#include "core/autograd.h"
#include "prune/criterion.h"

namespace pac::prune {

namespace {

double norm_of(const std::vector<Tensor>& tensors) {
  double total = 0.0;
  for (const auto& t : tensors) {
    const float* p = t.data<float>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) total += static_cast<double>(p[i]) * p[i];
  }
  return std::sqrt(total);
}

class Grasp : public Criterion {
 public:
  std::string name() const override { return "grasp"; }
  CriterionNeeds needs() const override { return {.data = true}; }
  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    PAC_CHECK(context.compute_gradients, "--prune grasp needs a batch of data for its gradient");
    context.compute_gradients();
    std::vector<Tensor> g = copy_gradients(params);
    std::vector<Tensor> saved;
    // Host copies: the scores are computed on the host, whatever device the model is on.
    for (const auto& [name, p] : params) saved.push_back(p->data().cpu().clone());
    double g_norm = norm_of(g), w_norm = norm_of(saved);
    if (g_norm == 0.0 || w_norm == 0.0) {  // no gradient flow to preserve: fall back to |w|
      std::vector<Tensor> scores;
      for (const auto& w : saved) scores.push_back(abs_of(w));
      return scores;
    }
    const double h = 1e-3 * w_norm;
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor shifted = saved[i].clone();
        float* w = shifted.data<float>();
        const float* pg = g[i].data<float>();
        for (int64_t j = 0, n = g[i].numel(); j < n; ++j)
          w[j] += static_cast<float>(h / g_norm * pg[j]);
        Tensor data = params[i].second->data();
        data.copy_(shifted);
      }
    }
    context.compute_gradients();
    std::vector<Tensor> g_shifted = copy_gradients(params);
    std::vector<Tensor> scores;
    for (size_t i = 0; i < params.size(); ++i) {
      {
        NoGradGuard no_grad;
        Tensor data = params[i].second->data();
        data.copy_(saved[i]);
      }
      Tensor s = Tensor::empty(saved[i].shape());
      const float* w = saved[i].data<float>();
      const float* g0 = g[i].data<float>();
      const float* g1 = g_shifted[i].data<float>();
      float* ps = s.data<float>();
      const double factor = g_norm / h;
      for (int64_t j = 0, n = s.numel(); j < n; ++j)
        ps[j] = static_cast<float>(w[j] * (g1[j] - g0[j]) * factor);
      scores.push_back(s);
    }
    return scores;
  }
};

}  // namespace

std::unique_ptr<Criterion> make_grasp() { return std::make_unique<Grasp>(); }

}  // namespace pac::prune
