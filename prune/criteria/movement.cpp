// movement (Sanh et al. 2020, "Movement pruning: adaptive sparsity by fine-tuning"): keep the
// weights that training moves away from zero. Gradient descent changes w by -lr * g, so
// -w * g > 0 means |w| is growing; the score sums -w * g over every step since the last pruning
// event. With no step observed yet it uses one batch.
#include <utility>

#include "prune/criterion.h"

namespace pac::prune {

namespace {

class Movement : public Criterion {
 public:
  std::string name() const override { return "movement"; }
  // Its sums (or its one batch) come from data: every rank's scores are averaged.
  CriterionNeeds needs() const override { return {.data = true}; }

  void observe(const NamedParameters& params) override {
    if (sums_.empty()) {
      for (const auto& [name, p] : params) sums_.push_back(Tensor::zeros(p->shape()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = params[i].second->dense_grad();  // zeros at pruned positions
      if (!g.defined()) continue;
      g = g.cpu();  // the sums live on the host (a copy per step when training on a GPU)
      Tensor w = params[i].second->data().cpu();
      const float* pg = g.data<float>();
      const float* pw = w.data<float>();
      float* s = sums_[i].data<float>();
      for (int64_t j = 0, n = g.numel(); j < n; ++j) s[j] -= pw[j] * pg[j];
    }
  }

  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    if (sums_.empty()) {
      PAC_CHECK(context.compute_gradients,
                "--prune movement before any training step needs a batch of data");
      context.compute_gradients();
      observe(params);
    }
    return std::exchange(sums_, {});
  }

  StateDict state() const override { return sums_to_state(sums_); }

  void load_state(const StateDict& state, const NamedParameters& params) override {
    StateReader read("criterion movement", state);
    sums_ = sums_from_state(read, params);
    read.finish();
  }

 private:
  std::vector<Tensor> sums_;  // per parameter: sum over observed steps of -w * g
};

}  // namespace

std::unique_ptr<Criterion> make_movement() { return std::make_unique<Movement>(); }

}  // namespace pac::prune
