// --resume: a TrainingRun continued from a checkpoint, on the same number of ranks or another
// (docs/reliability.md): the weights, masks, optimizer state and position in the run, then each
// rank's own state, mapped onto this run's ranks where their number changed.
#include <cstdio>

#include "apps/training_run.h"
#include "prune/mask_sync.h"

namespace pac {

// --resume: weights, masks, optimizer state, the position in the run, and each rank's own
// state. Then the masks, loaded or not, must agree before the first compact all-reduce.
void TrainingRun::resume() {
  const Clock::time_point started = Clock::now();
  RunState loaded_run;
  if (!o_.resume.empty()) {
    auto loaded = load_checkpoint(o_.resume, config_, *model_, optimizer_.get());
    PAC_CHECK(loaded.optimizer_name == o_.optimizer,
              "{}: checkpoint was trained with --optimizer {}, this run uses {}", o_.resume,
              loaded.optimizer_name, o_.optimizer);
    const int64_t saved_global = loaded.position.global_batch, global = o_.batch * world_;
    PAC_CHECK(loaded.position.world_size == world_ || saved_global > 0,
              "{}: checkpoint was written by {} ranks, this run has {}, and it does not record "
              "its global batch (it predates --global-batch), which resuming on another number "
              "of ranks keeps; resume it on {} ranks",
              o_.resume, loaded.position.world_size, world_, loaded.position.world_size);
    PAC_CHECK(saved_global == 0 || saved_global == global || o_.allow_batch_change,
              "{}: checkpoint was trained with a global batch of {}, this run's is {} ({} ranks "
              "x --batch {}); another batch changes the steps of an epoch and the schedules. "
              "Give --global-batch {} to keep it, or --allow-batch-change to change it",
              o_.resume, saved_global, global, world_, o_.batch, saved_global);
    position_ = loaded.position;
    resumed_from_ranks_ = loaded.position.world_size;
    if (saved_global > 0 && saved_global != global) change_global_batch(saved_global);
    if (!quiet_ && loaded.position.world_size != world_) {
      std::printf(
          "resuming a checkpoint of %ld ranks on %d: the same global batch of %ld, %ld "
          "a rank\n",
          static_cast<long>(loaded.position.world_size), world_, static_cast<long>(global),
          static_cast<long>(o_.batch));
    }
    loaded_run = std::move(loaded.run);
  }
  position_.world_size = world_;
  position_.global_batch = o_.batch * world_;
  params_ = model_->named_parameters();
  if (world_ > 1) prune::check_masks_agree(*group_, params_);
  if (o_.resume.empty()) return;
  resume_seconds_.load = seconds_since(started);
  const Clock::time_point restoring = Clock::now();
  RestoredRunState restored =
      restore_run_state(loaded_run, o_.resume, *group_, reducer_.get(), o_.compress, pruner_.get(),
                        sync_name_, o_.seed, position_.step);
  if (scaler_ && !loaded_run.grad_scaler.empty()) {
    scaler_->load_state(loaded_run.grad_scaler, o_.resume);
  } else if (scaler_) {
    restored.notes.push_back(fmt::format(
        "the checkpoint was not trained in fp16: loss scaling starts from {}", scaler_->scale()));
  } else if (!loaded_run.grad_scaler.empty()) {
    restored.notes.push_back(fmt::format(
        "the checkpoint's fp16 loss scale is not used: this run trains in {}", o_.precision));
  }
  if (!quiet_) {
    for (const std::string& note : restored.notes) std::printf("  %s\n", note.c_str());
  }
  if (outer_) {
    StateReader read(fmt::format("{}: rank {}'s --sync {} state", o_.resume, rank_, sync_name_),
                     restored.sync);
    optimizer_->load_state(read.section("inner."));
    outer_->load_state(read.section("outer."));
    read.finish();
  }
  resume_seconds_.state = seconds_since(restoring);
}

// --allow-batch-change: the checkpoint's place in its epoch, in samples, becomes a batch of this
// run's global batch, and the step the one it has in this run's epochs, which the learning-rate
// and pruning schedules follow.
void TrainingRun::change_global_batch(int64_t saved_global) {
  const int64_t global = o_.batch * world_;
  const RunPosition saved = position_;
  position_.batch = std::min(saved.batch * saved_global / global, batches_);
  position_.step = saved.epoch * batches_ + position_.batch;
  if (quiet_) return;
  std::printf(
      "--allow-batch-change: the global batch goes from %ld to %ld samples, an epoch is now %ld "
      "steps; epoch %ld resumes at its batch %ld (sample %ld of the epoch's order), step %ld "
      "instead of %ld, which the learning-rate and pruning schedules follow; the learning rate "
      "itself is not rescaled\n",
      static_cast<long>(saved_global), static_cast<long>(global), static_cast<long>(batches_),
      static_cast<long>(saved.epoch), static_cast<long>(position_.batch),
      static_cast<long>(position_.batch * global), static_cast<long>(position_.step),
      static_cast<long>(saved.step));
}

}  // namespace pac
