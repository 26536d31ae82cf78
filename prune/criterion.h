// Criterion: how important each weight is. One method scores the entries (or the output channels)
// of the prunable parameters, higher = keep, in the spirit of PyTorch's
// prune.BasePruningMethod.compute_mask; the Pruner turns scores into masks. A new criterion is one
// file in prune/criteria/ plus one line in prune/registry.cpp, or a register_criterion() call
// from the program that uses it.
//
// The simple case is one method, score(params, context). A criterion that needs more declares it
// in needs() (data, global ranking, several rounds per event), reads --prune-opt key=value in
// configure(), and may run its own forward and backward passes on context.model: while it scores,
// the gradients stay local (nothing is all-reduced), and afterwards the Pruner puts back whatever
// it changed (buffers, train/eval flags, the random stream, and the weights where needs() says
// it changes them).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/option_reader.h"
#include "core/state_dict.h"
#include "layers/module.h"

namespace pac::prune {

using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

// layer: every prunable tensor loses the same fraction of its units; global: one ranking of all
// units of all prunable tensors.
enum class Scope { layer, global };

// What a criterion may use besides the weights.
struct ScoreContext {
  // The event. `sparsity` is what this round prunes to: the fraction of the prunable units
  // (entries, or channels) pruned once its masks are installed; `final_sparsity` is the event's.
  double sparsity = 0.0;
  double final_sparsity = 0.0;
  Scope scope = Scope::layer;
  int64_t round = 0;  // 0 .. rounds - 1; masks of the earlier rounds are installed
  int64_t rounds = 1;
  int64_t event = 0;  // how many pruning events came before this one
  uint64_t seed = 0;  // for criteria that draw random numbers

  // The model the parameters belong to, and the shape of one training batch's input
  // ([batch, channels, height, width]; empty when the caller does not know it).
  nn::Module* model = nullptr;
  Shape input_shape;
  // Runs forward and backward on one batch of this rank's data (the same batch every call) and
  // leaves the loss gradients in the parameters' .grad. Empty when no data is at hand.
  std::function<void()> compute_gradients;
};

enum class Granularity {
  entry,          // one score per weight entry, shaped like the parameter
  output_channel  // one score per output channel (dim 0); the whole channel is kept or pruned
};

// What a criterion asks of a pruning event; the defaults suit one that reads only the weights.
struct CriterionNeeds {
  // Its scores depend on this rank's data (it calls compute_gradients(), or sums what observe()
  // saw): every rank scores its own batch and the Pruner averages the scores over the ranks, more
  // data in the same time. Otherwise every rank computes the same scores.
  bool data = false;
  // Its scores only compare across layers: --prune-scope layer is refused, global the default.
  bool global_scope = false;
  // Global ranking suits it best, but per-layer ranking is allowed: global is the default and
  // --prune-scope layer is accepted.
  bool global_by_default = false;
  // Scores and prunes this many times per event, the masks installed between rounds and the
  // density falling geometrically from the current one to the event's target (SynFlow's
  // iterative schedule).
  int64_t rounds = 1;
  // It changes the weights while it scores (SynFlow scores a model of |w|): the Pruner keeps a
  // copy of them to put back. Without it the Pruner keeps none (a copy is as large as the
  // model) and only checks that the weights came back unchanged.
  bool changes_weights = false;
};

class Criterion {
 public:
  virtual ~Criterion() = default;
  virtual std::string name() const = 0;
  virtual Granularity granularity() const { return Granularity::entry; }
  virtual CriterionNeeds needs() const { return {}; }
  // Reads this criterion's --prune-opt key=value options; a key it does not ask for is an error.
  virtual void configure(OptionReader& options) { (void)options; }
  // One score tensor per parameter of `params`, f32 or f64 (for products whose range f32 cannot
  // hold): shaped like it (entry granularity) or [shape[0]] (output_channel). Scores of
  // already-pruned entries are ignored: masks only shrink. Any other score that is not finite is
  // an error naming its parameter. An event that prunes nothing (a gradual schedule's first, at
  // 0%) does not call it, so sums that observe() accumulates carry on to the next event.
  //
  // The gradients: for a pruned weight, .grad is compact (the kept entries only, as the
  // all-reduce carries them); p->dense_grad() is the gradient in the weight's shape, zero at
  // pruned entries. A per-entry criterion reads dense_grad().
  virtual std::vector<Tensor> score(const NamedParameters& params, ScoreContext& context) = 0;
  // For criteria that accumulate over steps (taylor, movement): called on every rank after every
  // applied training step's backward and gradient reduction, before gradient clipping and the
  // optimizer step, with the same parameters as score(). It sees the gradient as the compressor
  // delivered it: the ranks' average, decoded (with enc=ternary the ternary-coded values, not
  // the exact ones); a skipped step is not observed. Under --sync local or diloco a step
  // reduces nothing: it sees this rank's own gradient, so the ranks' sums differ. Such a
  // criterion declares needs().data, so that an event averages the ranks' scores, and its
  // state() is kept per rank in checkpoints.
  virtual void observe(const NamedParameters& params) { (void)params; }
  // What observe() accumulated, for checkpoints. load_state gets the same parameters as observe.
  virtual StateDict state() const { return {}; }
  virtual void load_state(const StateDict& state, const NamedParameters& params);
};

using CriterionFactory = std::function<std::unique_ptr<Criterion>()>;

// Builds a criterion by name (the built-in table, then those added with register_criterion()) and
// configures it with `options` (--prune-opt).
std::unique_ptr<Criterion> make_criterion(const std::string& name, const OptionMap& options = {});
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
// Marks the `k` largest of `n` scores in `keep` (1 = keep); ties go to the earlier position. The
// ranking the Pruner uses, for criteria that rank within their own rounds.
void keep_top(const double* scores, int64_t n, int64_t k, uint8_t* keep);

}  // namespace pac::prune
