// Pruner: decides which weights are kept, when. It picks the prunable parameters (weights of two
// or more dimensions; biases and norm parameters never, plus --prune-exclude patterns), asks the
// criterion for scores when the schedule says so, keeps the top ones per layer or globally, and
// makes the masks identical on every rank (rank 0's are broadcast, then checksummed). Masks only
// ever shrink. The trainer calls step() before every training step and observe() after every
// backward. When the ranks train on their own between synchronisations (local SGD, DiLoCo), an
// event that falls between two waits for the next: masks are agreed on the ranks' common weights.
//
// Every rank scores, at the same time, so no rank waits in a collective while another computes:
// a criterion that needs data scores this rank's own batch and the scores are averaged over the
// ranks; one that does not computes the same scores everywhere. While a criterion scores, the
// Reducer is paused (its backward passes stay local), and afterwards the weights, buffers,
// train/eval flags and random stream are put back as they were.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/reducer.h"
#include "prune/criterion.h"
#include "prune/schedule.h"

namespace pac::prune {

struct PrunerOptions {
  std::string criterion = "magnitude";
  double sparsity = 0.5;  // final fraction of the prunable weights (or channels) pruned
  // layer: every tensor to the same sparsity; global: one ranking. Empty: the criterion's choice
  // (global for one that needs it, layer otherwise).
  std::string scope;
  std::string schedule = "oneshot:0";
  std::vector<std::string> exclude;  // glob patterns on dotted names ("conv1.*", "fc.weight")
  uint64_t seed = 0;
  int64_t steps_per_epoch = 0;  // for imp schedules
  OptionMap criterion_options;  // --prune-opt key=value
};

struct PruneStep {
  bool pruned = false;   // masks were recomputed at this step
  bool rewound = false;  // imp: the weights went back to the start; reset the optimizer state
};

class Pruner {
 public:
  // Call after the model's weights are identical on every rank (after the Reducer is built): imp
  // keeps a copy of them to rewind to. `reducer` (if any) is paused while a criterion scores.
  Pruner(nn::Module& model, const PrunerOptions& options, comm::ProcessGroupPtr group,
         comm::Reducer* reducer = nullptr);

  // Before training step `step` (= steps completed). With `ranks_agree` false (the ranks' weights
  // differ: local steps since the last synchronisation) an event due now waits; the next call
  // with `ranks_agree` takes it, to the sparsity of the latest event waiting and rewinding if any
  // of them rewinds.
  PruneStep step(int64_t step, ScoreContext& context, bool ranks_agree = true);
  // Whether step(step, ...) has an event to take: one due at `step` or one waiting.
  bool event_due(int64_t step) const { return waiting_.due || schedule_.at(step).due; }
  // Prunes to `sparsity` now, whatever the schedule (prune-report, tests).
  void prune_to(double sparsity, ScoreContext& context);
  // After a backward, for criteria that accumulate over steps.
  void observe();

  const NamedParameters& prunable() const { return prunable_; }
  // Every parameter that can get a mask: the prunable ones and, for channel criteria, the biases
  // and batch-norm parameters coupled to their channels.
  const NamedParameters& masked() const { return masked_; }
  double sparsity() const;  // of the prunable weights now
  Scope scope() const { return scope_; }
  const PruneSchedule& schedule() const { return schedule_; }
  const PrunerOptions& options() const { return options_; }
  std::string describe() const;

  // For checkpoints: the criterion's running sums ("criterion."), imp's weights to rewind to
  // ("rewind.<parameter>"), the number of events so far and an event that waits for the ranks
  // to agree ("waiting_sparsity", "waiting_rewind"). The masks are the parameters'.
  StateDict state() const;
  void load_state(const StateDict& state);
  // The criterion's own part of state(): what observe() accumulated. Under local SGD and DiLoCo
  // it differs between ranks, so checkpoints keep it per rank.
  StateDict criterion_state() const;
  void load_criterion_state(const StateDict& state);

 private:
  // This rank's scores for one round (f64, on the host; averaged over the ranks for a criterion
  // that needs data), after every rank has scored without error.
  std::vector<Tensor> score_on_every_rank(ScoreContext& context);
  // Shapes, dtypes and finiteness of a criterion's scores, as f64 host tensors.
  std::vector<Tensor> checked_scores(const std::vector<Tensor>& scores) const;
  std::vector<Tensor> keep_decisions(const std::vector<Tensor>& scores, double sparsity) const;
  // The masks of masked_ that the keep decisions imply (rank 0); install_masks sets them.
  std::vector<Tensor> proposed_masks(const std::vector<Tensor>& keep) const;

  nn::Module& model_;
  PrunerOptions options_;
  comm::ProcessGroupPtr group_;
  comm::Reducer* reducer_;
  std::unique_ptr<Criterion> criterion_;
  Scope scope_ = Scope::layer;
  PruneSchedule schedule_;
  NamedParameters prunable_, masked_;
  // Per prunable parameter: the parameters whose entry c is pruned with output channel c.
  std::vector<std::vector<nn::ParameterPtr>> coupled_;
  std::vector<Tensor> rewind_to_;  // imp: every parameter's value at the start
  int64_t events_ = 0;
  PruneEvent waiting_;  // due while the ranks' weights differed
};

// Glob match with '*' (any run of characters) and '?' (one character).
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace pac::prune
