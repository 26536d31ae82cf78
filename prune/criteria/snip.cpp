// snip (Lee et al. 2019, "SNIP: single-shot network pruning based on connection sensitivity"):
// |g * w| on one batch, the first-order effect on the loss of removing a weight. Meant for pruning
// at initialisation (--prune-schedule oneshot:0), but usable at any step.
#include "prune/criterion.h"

namespace pac::prune {

namespace {

class Snip : public Criterion {
 public:
  std::string name() const override { return "snip"; }
  CriterionNeeds needs() const override { return {.data = true}; }
  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    PAC_CHECK(context.compute_gradients, "--prune snip needs a batch of data for its gradient");
    context.compute_gradients();
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(abs_product(p->dense_grad(), p->data()));
    return scores;
  }
};

}  // namespace

std::unique_ptr<Criterion> make_snip() { return std::make_unique<Snip>(); }

}  // namespace pac::prune
