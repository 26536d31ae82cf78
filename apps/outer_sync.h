// Communicating less often: local SGD and DiLoCo. Between synchronisations every rank trains on
// its own (the Reducer paused, nothing all-reduced); every H steps the ranks agree again.
//   local:H   post-local SGD (Lin et al. 2020; PyTorch's PeriodicModelAverager): the parameters
//             are averaged.
//   diloco:H  DiLoCo (Douillard et al. 2023): the pseudo-gradient anchor - local, averaged over the
//             ranks, takes an outer step of SGD with Nesterov momentum from the anchor (the
//             parameters at the last synchronisation), whose result every rank continues from.
// Averaging the parameters is the outer step with learning rate 1 and no momentum, so both go the
// same way: the pseudo-gradient is written into the parameters' gradients and reduced by the
// Reducer, through its buckets and compressor. With pruning masks it is exactly zero at pruned
// entries on every rank, so pactrain sends only the kept ones (ternary-coded with error feedback
// if asked): fewer synchronisations, times fewer values, times fewer bits. Buffers (batch-norm
// statistics) are averaged only where they are about to be read: at the end of an epoch, a
// checkpoint or the run. Training mode never reads them, and a running average is linear in what
// it takes in, so averaging it once there gives what averaging it at every synchronisation would
// (to rounding), for one all-reduce of the statistics an epoch instead of one a period. Those
// re-estimated before every use (SyncOptions::unshared_buffers) never travel.
//   diloco:H:fragments=F[:mix=A]
//             Streaming DiLoCo (streaming_diloco.h): one of F fragments every H/F steps, its
//             all-reduce overlapped with the inner steps that follow, mixed in with weight A.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "apps/streaming_diloco.h"
#include "comm/reducer.h"
#include "optim/sgd.h"

namespace pac {

struct SyncOptions {
  std::string kind = "step";                     // step (every step's gradients), local or diloco
  int64_t every = 1;                             // H: inner steps between synchronisations
  int64_t warmup = 0;                            // synchronous steps before the first local one
  float outer_lr = 0.7f, outer_momentum = 0.9f;  // diloco's outer SGD (Nesterov)
  int64_t fragments = 0;                         // > 0: streaming DiLoCo with F fragments
  float mix = 0.5f;  // streaming: the weight of a rank's own values against the global ones
  // Buffers left out of the averaging at a synchronisation, by name: batch-norm statistics that
  // are recalibrated before each evaluation (nn::recalibrated_buffer_names).
  std::set<std::string> unshared_buffers;
};

// "step", "local:H", "diloco:H" or "diloco:H:fragments=F[:mix=A]"; a clear error for anything
// else.
SyncOptions parse_sync(const std::string& spec);

class OuterSync {
 public:
  // Call once the ranks' parameters are identical (after the Reducer is built). Streaming
  // DiLoCo needs `stream_compressor`, an instance of its own of the run's compressor.
  OuterSync(nn::Module& model, comm::Reducer& reducer, comm::ProcessGroupPtr group,
            const SyncOptions& options,
            std::unique_ptr<comm::Compressor> stream_compressor = nullptr);

  // Whether training step `step` (0-based) runs on this rank alone. Pauses or resumes the
  // Reducer to match; at the end of the warm-up it takes the anchor.
  bool begin_step(int64_t step);
  // After a local step: whether `steps_done` ends a period (never when streaming: its fragments
  // take their turns in after_local_step()).
  bool due(int64_t steps_done) const;
  // Streaming only: after a local step, a fragment's turn when one is due (nothing otherwise).
  bool turn_due(int64_t steps_done) const;
  comm::ReducerStepStats after_local_step(int64_t steps_done);
  // Synchronises now: the end of a period (`with_buffers` false), or of an epoch, a checkpoint
  // or the run (true: the buffers are averaged too, so that the model evaluated and saved is the
  // ranks' common one). Returns what the all-reduces cost.
  comm::ReducerStepStats synchronise(bool with_buffers = true);
  // Local steps since the last synchronisation.
  int64_t pending() const { return pending_; }
  // Whether the ranks hold the same weights: no local step since the last synchronisation (the
  // trainer prunes only then, so that the masks come from the ranks' common weights).
  bool in_agreement() const { return pending_ == 0; }
  // After a pruning event, in agreement: the anchor becomes the pruned (or rewound) weights, and
  // after a rewind the outer momentum starts again, as the inner optimizer's does.
  void after_prune(bool rewound);
  // For checkpoints, taken right after a synchronisation (the trainer makes every checkpoint
  // step one): the outer optimizer's state. The anchor is then the parameters themselves.
  StateDict state() const;
  // Restores state() on a model whose parameters are those of that synchronisation.
  void load_state(const StateDict& state);
  const SyncOptions& options() const { return options_; }
  // The streaming part (null unless fragments were asked for).
  const StreamingDiLoCo* streaming() const { return stream_.get(); }

 private:
  nn::Module& model_;
  comm::Reducer& reducer_;
  comm::ProcessGroupPtr group_;
  SyncOptions options_;
  optim::NamedParameters params_;
  std::vector<Tensor> anchor_;  // the parameters at the last synchronisation
  std::unique_ptr<optim::Sgd> outer_;
  std::unique_ptr<StreamingDiLoCo> stream_;
  int64_t pending_ = 0;

  // Batch-norm statistics and other f32 buffers, averaged over the ranks (but unshared_buffers).
  // Returns the bytes this rank sent for them.
  uint64_t average_buffers();
};

}  // namespace pac
