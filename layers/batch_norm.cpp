#include "layers/batch_norm.h"

#include "core/autograd.h"
#include "core/ops.h"

namespace pac::nn {

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  PAC_CHECK(channels > 0, "BatchNorm2d: channels must be positive, got {}", channels);
  weight = register_parameter("weight", Tensor::ones({channels}));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = Tensor::zeros({channels});
  running_var = Tensor::ones({channels});
  register_buffer("running_mean", running_mean);
  register_buffer("running_var", running_var);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  return batch_norm(x, weight->data(), bias->data(), running_mean, running_var, is_training(),
                    momentum_, eps_);
}

std::string BatchNorm2d::describe() const { return fmt::format("BatchNorm2d({})", channels_); }

void BatchNorm2d::set_momentum(float momentum) {
  PAC_CHECK(momentum >= 0.0f && momentum <= 1.0f, "BatchNorm2d: momentum must be in [0, 1], got {}",
            momentum);
  momentum_ = momentum;
}

int recalibrate_batch_norm(Module& model, int64_t batches,
                           const std::function<Tensor(int64_t)>& input) {
  PAC_CHECK(batches > 0, "recalibrate_batch_norm: batches must be positive, got {}", batches);
  std::vector<BatchNorm2d*> layers;
  for (auto& [name, module] : model.named_modules()) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(module)) layers.push_back(bn);
  }
  if (layers.empty()) return 0;
  std::vector<float> momenta;
  for (BatchNorm2d* bn : layers) momenta.push_back(bn->momentum());
  const std::vector<bool> modes = model.training_modes();
  model.train();
  {
    NoGradGuard no_grad;
    // Batch t weighs 1 / (t + 1): the first replaces the old statistics, and after the last the
    // running values are the mean of every batch's (its variance the unbiased one, as always).
    for (int64_t t = 0; t < batches; ++t) {
      for (BatchNorm2d* bn : layers) bn->set_momentum(1.0f / static_cast<float>(t + 1));
      model(input(t));
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->set_momentum(momenta[i]);
  model.set_training_modes(modes);
  return static_cast<int>(layers.size());
}

std::set<std::string> recalibrated_buffer_names(Module& model) {
  std::set<std::string> names;
  for (auto& [name, module] : model.named_modules()) {
    if (!dynamic_cast<BatchNorm2d*>(module)) continue;
    const std::string prefix = name.empty() ? "" : name + ".";
    names.insert(prefix + "running_mean");
    names.insert(prefix + "running_var");
  }
  return names;
}

}  // namespace pac::nn
