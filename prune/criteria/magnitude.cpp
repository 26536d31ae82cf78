// magnitude: |w|. The classic criterion (Han et al. 2015; Zhu & Gupta 2017 with a gradual
// schedule; the lottery ticket's iterative pruning); needs no data.
#include "prune/criterion.h"

namespace pac::prune {

namespace {

class Magnitude : public Criterion {
 public:
  std::string name() const override { return "magnitude"; }
  std::vector<Tensor> score(const NamedParameters& params, ScoreContext&) override {
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) scores.push_back(abs_of(p->data()));
    return scores;
  }
};

}  // namespace

std::unique_ptr<Criterion> make_magnitude() { return std::make_unique<Magnitude>(); }

}  // namespace pac::prune
