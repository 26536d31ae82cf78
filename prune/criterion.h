// Criterion: how important each weight is. One method scores the entries (or the output channels)
// of the prunable parameters, higher = keep, in the spirit of PyTorch's
// prune.BasePruningMethod.compute_mask; the Pruner turns scores into masks. A new criterion is one
// file plus one line in prune/registry.cpp, or a register_criterion() call from the program
// that uses it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "layers/module.h"

namespace pac::prune {

using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

// What a criterion may use besides the weights.
struct ScoreContext {
  // Runs forward and backward on one batch of this rank's data (the same batch every call) and
  // leaves the loss gradients in the parameters' .grad. Empty when no data is at hand.
  std::function<void()> compute_gradients;
  uint64_t seed = 0;  // for criteria that draw random numbers
  int64_t event = 0;  // how many pruning events came before this one
};

enum class Granularity {
  entry,          // one score per weight entry, shaped like the parameter
  output_channel  // one score per output channel (dim 0); the whole channel is kept or pruned
};

class Criterion {
 public:
  virtual ~Criterion() = default;
  virtual std::string name() const = 0;
  virtual Granularity granularity() const { return Granularity::entry; }
  // One f32 score tensor per parameter of `params`: shaped like it (entry granularity) or
  // [shape[0]] (output_channel). Scores of already-pruned entries are ignored: masks only shrink.
  virtual std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) = 0;
  // Called after every training step's backward with the same parameters, for criteria that
  // accumulate over steps (taylor); the gradients are in .grad.
  virtual void observe(const NamedParameters& params) { (void)params; }
  // What observe() accumulated, for checkpoints. load_state gets the same parameters as observe.
  virtual StateDict state() const { return {}; }
  virtual void load_state(const StateDict& state, const NamedParameters& params);
};

using CriterionFactory = std::function<std::unique_ptr<Criterion>()>;

// Builds a criterion by name: the built-in table, then those added with register_criterion().
std::unique_ptr<Criterion> make_criterion(const std::string& name);
std::vector<std::string> criterion_names();
// Adds (or replaces) a criterion for the rest of the process: how a fork or a test plugs one in
// without touching the library.
void register_criterion(const std::string& name, CriterionFactory factory);

// Shared helpers for criteria: |a * b| and |a| element by element, and a copy of every .grad.
Tensor abs_product(const Tensor& a, const Tensor& b);
Tensor abs_of(const Tensor& a);
std::vector<Tensor> copy_gradients(const NamedParameters& params);
// For criteria that keep one running sum per parameter: the sums as state ("sum.<i>"), and back
// (empty when nothing was observed).
StateDict sums_to_state(const std::vector<Tensor>& sums);
std::vector<Tensor> sums_from_state(StateReader& read, const NamedParameters& params);

}  // namespace pac::prune
