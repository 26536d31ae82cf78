// Optimizer: the base of SGD and AdamW. It updates parameters in place from their gradients and
// never talks to the network. A pruned parameter's gradient is compact (its kept entries), so the
// update touches only the kept positions, pruned entries stay exactly zero, and its state
// (momentum, moments) is compact too: [kept_count] values, (1 - sparsity) of a dense model's.
// When a mask changes, the state follows it: entries still kept keep theirs, newly kept ones start
// at zero. Checkpoints hold the state in the parameter's shape (zeros at pruned positions), as
// PyTorch's optimizers do.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "layers/parameter.h"

namespace pac::optim {

using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

// The gradient one update reads: `count` values, value j belonging to flat position position(j).
// State slots are indexed like the values (j), the data by position.
struct GradientView {
  const float* values = nullptr;
  const int32_t* positions = nullptr;  // null: value j is at position j (a dense parameter)
  int64_t count = 0;
  int64_t position(int64_t j) const { return positions ? positions[j] : j; }
};

class Optimizer {
 public:
  Optimizer(NamedParameters params, float lr);
  virtual ~Optimizer() = default;

  // One update from the current gradients; parameters without a gradient are skipped.
  void step();
  // Zeroes the gradients (in place: the Reducer's buckets stay where they are).
  void zero_grad();
  // Forgets all state (momentum, moments), as after rewinding the weights.
  void reset_state();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  int64_t steps_taken() const { return steps_; }

  // State for checkpoints, named "<parameter>.<slot>" (e.g. "fc.weight.momentum_buffer"), plus
  // "step", each slot in its parameter's shape. load_state checks that every name and shape
  // matches; it takes state saved before state became compact alike.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  // Updates one parameter; `slots` is its state, created by the subclass on first use: f32
  // [grad.count] per entry (index j, like the gradient), or a host scalar named "step".
  virtual void update(nn::Parameter& p, const GradientView& grad,
                      std::map<std::string, Tensor>& slots) = 0;

  NamedParameters params_;
  std::vector<std::map<std::string, Tensor>> slots_;  // per parameter
  float lr_;
  int64_t steps_ = 0;

 private:
  // Brings parameter i's per-entry state to its current kept set.
  void follow_mask(size_t i);

  // Per parameter, the layout its per-entry state has: the kept positions it was made for
  // (undefined: every position, in the parameter's shape) and that mask's version.
  std::vector<Tensor> state_kept_;
  std::vector<uint64_t> state_mask_version_;
};

}  // namespace pac::optim
