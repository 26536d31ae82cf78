// random: uniform random scores, the baseline every criterion must beat. Seeded by the run's seed
// and the pruning event, so a run is reproducible.
#include "core/generator.h"
#include "prune/criterion.h"

namespace pac::prune {

namespace {

class Random : public Criterion {
 public:
  std::string name() const override { return "random"; }
  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    Generator gen(context.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(context.event) + 1);
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) {
      Tensor s = Tensor::empty(p->shape());
      float* ps = s.data<float>();
      for (int64_t i = 0, n = s.numel(); i < n; ++i) ps[i] = gen.uniform();
      scores.push_back(s);
    }
    return scores;
  }
};

}  // namespace

std::unique_ptr<Criterion> make_random() { return std::make_unique<Random>(); }

}  // namespace pac::prune
