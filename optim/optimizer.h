// Optimizer: the base of SGD and AdamW. It updates parameters in place from their gradients and
// never talks to the network. Pruned entries (a Parameter's mask) stay exactly zero, and so does
// the optimizer state at those entries, so momentum cannot revive a pruned weight. When a
// compressor left a compact gradient in the Parameter (only the kept entries, averaged), the update
// reads it directly and touches only the kept positions: the unpack is fused into the update.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/kernels.h"
#include "layers/parameter.h"

namespace pac::optim {

using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

// The gradient one update reads: `count` values, value j belonging to flat position
// position(j). A dense gradient has no positions and carries the mask (the update zeroes the
// pruned entries and their state); a compact one lists the kept positions and needs no mask.
struct GradientView {
  const float* values = nullptr;
  const int32_t* positions = nullptr;  // null: value j is at position j
  int64_t count = 0;
  const uint8_t* mask = nullptr;  // null: every listed position is kept
  int64_t position(int64_t j) const { return positions ? positions[j] : j; }
  bool pruned(int64_t i) const { return mask && !mask[i]; }
  // The same view for the GPU's fused update kernels (all pointers are device pointers there).
  cuda::CompactGrad for_kernel() const { return {values, positions, count, mask}; }
};

class Optimizer {
 public:
  Optimizer(NamedParameters params, float lr);
  virtual ~Optimizer() = default;

  // One update from the current gradients (the compact one where a compressor left it);
  // parameters without a gradient are skipped.
  void step();
  // Zeroes the dense gradients and drops the compact ones.
  void zero_grad();
  // Forgets all state (momentum, moments), as after rewinding the weights.
  void reset_state();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  int64_t steps_taken() const { return steps_; }

  // State for checkpoints, named "<parameter>.<slot>" (e.g. "fc.weight.momentum_buffer"), plus
  // "step". load_state checks that every name and shape matches.
  std::map<std::string, Tensor> state() const;
  void load_state(const std::map<std::string, Tensor>& state);

 protected:
  // Updates one parameter; `slots` is its state (dense, shaped like the parameter), created by the
  // subclass on first use.
  virtual void update(nn::Parameter& p, const GradientView& grad,
                      std::map<std::string, Tensor>& slots) = 0;

  NamedParameters params_;
  std::vector<std::map<std::string, Tensor>> slots_;  // per parameter
  std::vector<uint64_t> mask_versions_;               // per parameter: the mask its state has seen
  float lr_;
  int64_t steps_ = 0;
};

}  // namespace pac::optim
