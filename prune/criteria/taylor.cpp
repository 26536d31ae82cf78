// taylor (Molchanov et al. 2017/2019): the first-order Taylor estimate |g * w| of a weight's
// effect on the loss, accumulated over every training step since the last pruning event, so the
// score reflects many batches instead of one. With no step observed yet (pruning at step 0) it
// falls back to one batch, as snip.
#include "prune/criterion.h"

namespace pac::prune {

namespace {

class Taylor : public Criterion {
 public:
  std::string name() const override { return "taylor"; }
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
      for (int64_t j = 0, n = g.numel(); j < n; ++j) s[j] += std::abs(pg[j] * pw[j]);
    }
    ++observed_;
  }

  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    if (observed_ == 0) {
      PAC_CHECK(context.compute_gradients,
                "--prune taylor before any training step needs a batch of data");
      context.compute_gradients();
      observe(params);
    }
    std::vector<Tensor> scores = std::move(sums_);
    sums_.clear();
    observed_ = 0;
    return scores;  // sums, not means: the scale does not change the ranking
  }

  StateDict state() const override {
    StateDict out = sums_to_state(sums_);
    out["observed"] = counter_tensor(observed_);
    return out;
  }

  void load_state(const StateDict& state, const NamedParameters& params) override {
    StateReader read("criterion taylor", state);
    sums_ = sums_from_state(read, params);
    observed_ = read.counter("observed");
    read.finish();
  }

 private:
  std::vector<Tensor> sums_;  // per parameter: sum over observed steps of |g * w|
  int64_t observed_ = 0;
};

}  // namespace

std::unique_ptr<Criterion> make_taylor() { return std::make_unique<Taylor>(); }

}  // namespace pac::prune
