// synflow (Tanaka et al. 2020, "Pruning neural networks without any data by iteratively
// conserving synaptic flow"): a data-free criterion for pruning at initialisation. Every weight
// is replaced by its magnitude, an input of ones goes through the network with its normalisation
// layers in inference mode, and R, the sum of the outputs, is differentiated: the score of w is
// w * dR/dw, the flow of R through it. Pruned in one go this empties whole layers first (layer
// collapse), so it prunes in rounds (100 in the paper; --prune-opt rounds=N), the density falling
// geometrically and the network rescored with the masks of earlier rounds installed.
//
// Two details. Biases, batch-norm shifts and running means are zeroed for the pass, as in the
// paper's analysis: the network is then positively homogeneous in its input, so an input of
// ones * a scales R and every score by a. R is a product over every layer, so a deep network's
// overflows f32 (ResNet-32's passes 1e38): the pass scales its input and its backward pass down,
// and the scores, scaled back up, are returned in f64. The Pruner puts back everything changed
// here after scoring.
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "prune/criterion.h"

namespace pac::prune {

namespace {

class SynFlow : public Criterion {
 public:
  std::string name() const override { return "synflow"; }
  // Its scores compare layers with each other, and its point is to prune in many rounds.
  CriterionNeeds needs() const override {
    return {.global_scope = true, .rounds = rounds_, .changes_weights = true};
  }
  void configure(OptionReader& options) override { rounds_ = options.integer("rounds", 100); }

  std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) override {
    PAC_CHECK(context.model && context.input_shape.size() >= 2,
              "--prune synflow needs the model and the shape of its input");
    nn::Module& model = *context.model;
    PAC_CHECK(model.input_dtype() == DType::f32,
              "--prune synflow feeds the model an all-ones input; {} takes {} tokens, which have "
              "no such input (use magnitude, taylor, grasp or movement)",
              model.describe(), dtype_name(model.input_dtype()));
    linearize(model);
    Shape shape = context.input_shape;
    shape[0] = 1;
    const Device device = params[0].second->data().device();
    auto ones = [&](double a) { return Tensor::full(shape, static_cast<float>(a)).to(device); };
    // How large R is: the largest input scale that keeps it finite tells.
    double flow = std::numeric_limits<double>::infinity();
    for (double a : {1.0, 0x1p-64, 0x1p-126}) {
      NoGradGuard no_grad;
      const double r = sum(model(ones(a))).item();
      if (std::isfinite(r)) {
        flow = r / a;
        break;
      }
    }
    PAC_CHECK(std::isfinite(flow), "synflow: the flow of {} is beyond the range of f32",
              model.describe());
    // The pass itself: the input scaled by a, and the seed of the backward pass by a too, so that
    // activations and gradients both stay within f32 when R is large.
    const double a = flow > 1.0 ? 1.0 / std::sqrt(flow) : 1.0;
    model.zero_grad();
    mul_scalar(sum(model(ones(a))), static_cast<float>(a)).backward();
    std::vector<Tensor> scores;
    for (const auto& [name, p] : params) {
      Tensor w = p->data().cpu(), g = p->dense_grad().cpu();
      Tensor s = Tensor::empty(w.shape(), DType::f64);
      const float* pw = w.data<float>();
      const float* pg = g.data<float>();
      double* ps = s.data<double>();
      for (int64_t j = 0, n = s.numel(); j < n; ++j)
        ps[j] = static_cast<double>(pw[j]) * static_cast<double>(pg[j]) / (a * a);
      scores.push_back(s);
    }
    return scores;
  }

 private:
  // Weights to their magnitudes, shifts to zero, normalisation layers to inference mode.
  static void linearize(nn::Module& model) {
    NoGradGuard no_grad;
    model.eval();
    for (auto& [name, p] : model.named_parameters()) {
      Tensor data = p->data();
      if (name.ends_with("bias"))
        data.zero_();
      else
        data.copy_(abs(data));
    }
    for (auto& [name, b] : model.named_buffers()) {
      if (name.ends_with("running_mean")) b.zero_();
    }
  }

  int64_t rounds_ = 100;
};

}  // namespace

std::unique_ptr<Criterion> make_synflow() { return std::make_unique<SynFlow>(); }

}  // namespace pac::prune
