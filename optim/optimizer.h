// Optimizer: the base of SGD and AdamW. It updates parameters in place from their gradients and
// never talks to the network. Pruned entries (a Parameter's mask) stay exactly zero, and so does
// the optimizer state at those entries, so momentum cannot revive a pruned weight.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "layers/parameter.h"

namespace pac::optim {

using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

class Optimizer {
 public:
  Optimizer(NamedParameters params, float lr);
  virtual ~Optimizer() = default;

  // One update from the current gradients; parameters without a gradient are skipped.
  void step();
  void zero_grad();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  int64_t steps_taken() const { return steps_; }

  // State for checkpoints, named "<parameter>.<slot>" (e.g. "fc.weight.momentum_buffer"), plus
  // "step". load_state checks that every name and shape matches.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  // Updates one parameter; `slots` is its state, created by the subclass on first use.
  virtual void update(nn::Parameter& p, const Tensor& grad,
                      std::map<std::string, Tensor>& slots) = 0;

  NamedParameters params_;
  std::vector<std::map<std::string, Tensor>> slots_;  // per parameter
  float lr_;
  int64_t steps_ = 0;
};

}  // namespace pac::optim
