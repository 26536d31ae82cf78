// BatchNorm2d: per-channel normalisation of [N, C, H, W] (or [N, C]) with learnable weight and
// bias and running statistics (buffers running_mean, running_var) used in evaluation.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "layers/module.h"

namespace pac::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  ParameterPtr weight, bias;
  Tensor running_mean, running_var;
  // The weight of each batch's statistics in the running ones.
  float momentum() const { return momentum_; }
  void set_momentum(float momentum);

 private:
  int64_t channels_;
  float eps_, momentum_;
};

// Re-estimates the running statistics of every BatchNorm2d in `model` as the plain average over
// `batches` forward passes in training mode, without gradients, of input(0) .. input(batches -
// 1), as SWA's update_bn: for weights that moved without their statistics (an outer step that
// extrapolates past the average the statistics were gathered under). Every module's train/eval
// flag and every momentum are left as they were. Returns how many layers it re-estimated;
// with none it runs nothing.
int recalibrate_batch_norm(Module& model, int64_t batches,
                           const std::function<Tensor(int64_t)>& input);
// The buffers recalibrate_batch_norm re-estimates, by their names in model.named_buffers(): code
// that recalibrates before every use of them need not keep them in agreement otherwise.
std::set<std::string> recalibrated_buffer_names(Module& model);

}  // namespace pac::nn
