// channel-l1 (Li et al. 2017, "Pruning filters for efficient ConvNets"): structured pruning of
// whole output channels, ranked by the L1 norm of their filter. The Pruner prunes the channel's
// bias and the batch-norm channel that follows it together with the filter, so the channel's
// output is exactly zero. Scores are mean |w| per channel (L1 / fan-in), so that global scope
// compares layers of different fan-in fairly; within a layer the order is the L1 order.
#include <cmath>

#include "prune/criterion.h"

namespace pac::prune {

namespace {

class ChannelL1 : public Criterion {
 public:
  std::string name() const override { return "channel-l1"; }
  Granularity granularity() const override { return Granularity::output_channel; }
  std::vector<Tensor> score(const NamedParameters& params, ScoreContext&) override {
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) {
      int64_t channels = p->shape()[0], fan_in = p->numel() / channels;
      Tensor s = Tensor::zeros({channels});
      Tensor weights = p->data().cpu();
      const float* w = weights.data<float>();
      for (int64_t c = 0; c < channels; ++c) {
        double l1 = 0.0;
        for (int64_t j = 0; j < fan_in; ++j) l1 += std::abs(w[c * fan_in + j]);
        s.data<float>()[c] = static_cast<float>(l1 / fan_in);
      }
      scores.push_back(s);
    }
    return scores;
  }
};

}  // namespace

std::unique_ptr<Criterion> make_channel_l1() { return std::make_unique<ChannelL1>(); }

}  // namespace pac::prune
