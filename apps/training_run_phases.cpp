// The phases of a TrainingRun that the loop (apps/trainer.cpp) calls by name: loading a batch, a
// pruning event, a synchronisation, injected faults, an evaluation, a checkpoint, and the
// records and progress line that report them.
#include <cstdio>
#include <numbers>
#include <thread>

#include <fmt/ranges.h>

#include "apps/training_run.h"
#include "core/allocator.h"
#include "core/autograd.h"
#include "layers/batch_norm.h"

namespace pac {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

namespace {

// Gives every cached block back to the system: before and after a pruning event, so that its
// working set and the training step's are never held at once. (Evaluation needs none of this: it
// runs in the training batch's shapes and reuses the step's blocks.)
void release_cached_memory(Device device) {
  cpu_empty_cache();
  if (!device.is_cpu()) cuda_empty_cache();
}

}  // namespace

data::Batch TrainingRun::load_batch(int64_t b) {
  MemoryTagScope tag(MemoryTag::data);
  data::Batch batch = loader_->batch(b);
  if (sample_trace_) {
    // One line a step, flushed at once: a run killed later still shows what it trained on.
    fmt::print(sample_trace_.get(), "{}: {}\n", position_.step, fmt::join(batch.samples, " "));
    std::fflush(sample_trace_.get());
  }
  if (!device_.is_cpu()) {
    batch.inputs = batch.inputs.to(model_device_);
    batch.targets = batch.targets.to(model_device_);
  }
  return batch;
}

// The pruner's part of a step: a pruning event when one is due, and the report of it.
prune::PruneStep TrainingRun::pruning_event(const data::Batch& batch, StepCost& cost) {
  const int64_t step = position_.step;
  // Masks come from the ranks' common weights: between synchronisations an event waits for the
  // next one, except when streaming, whose fragments never all agree before the end of the
  // epoch: there the event is a synchronisation of its own, as a checkpoint is.
  if (outer_ && !outer_->in_agreement() && outer_->streaming() && pruner_->event_due(step))
    synchronise(true, cost);
  prune::ScoreContext context;
  context.input_shape = batch.inputs.shape();
  // The Pruner pauses the Reducer while the criterion scores: this gradient stays local.
  context.compute_gradients = [&] {
    optimizer_->zero_grad();
    batch_loss((*model_)(batch.inputs), batch.targets, o_.label_smoothing).backward();
  };
  const bool event = pruner_->event_due(step);
  const uint64_t bytes_before = group_->bytes_sent();
  if (event) release_cached_memory(device_);
  prune::PruneStep pruned = pruner_->step(step, context, !outer_ || outer_->in_agreement());
  if (event) release_cached_memory(device_);
  cost.pruning_bytes += group_->bytes_sent() - bytes_before;
  if (pruned.rewound) optimizer_->reset_state();
  if (pruned.pruned && outer_) outer_->after_prune(pruned.rewound);
  if (pruned.pruned && !quiet_ && !show_bar_) {
    std::printf("step %ld: pruned to %.1f%% sparsity%s\n", static_cast<long>(step),
                100.0 * pruner_->sparsity(), pruned.rewound ? ", weights rewound" : "");
  }
  // The last event (which may have waited for a synchronisation past its step).
  if (pruned.pruned && !quiet_ && step >= pruner_->schedule().last_step())
    std::printf("%s", prune::prune_report(*model_, report_options_).c_str());
  return pruned;
}

// Local SGD and DiLoCo: the ranks agree again (the parameters, or an outer step), with the
// buffers when the model is about to be evaluated or saved. None of it overlaps backward.
void TrainingRun::synchronise(bool with_buffers, StepCost& cost) {
  auto start = Clock::now();
  comm::ReducerStepStats stats = outer_->synchronise(with_buffers);
  const double took_s = seconds_since(start);
  cost.outer_s += took_s;
  cost.comm.bytes_sent += stats.bytes_sent;
  cost.comm.verdict_bytes += stats.verdict_bytes;
  cost.comm.codec_s += stats.codec_s;
  cost.comm.exchanges += stats.exchanges;
  cost.comm.exchanges_after_backward += stats.exchanges;
  cost.comm.comm_exposed_s += took_s - stats.codec_s;
}

// PAC_FAULT (apps/faults.h): the failures the fault tests inject at a given step and rank.
void TrainingRun::inject_faults() const {
  const int64_t step = position_.step;
  if (fault_.due("hang", step, rank_)) std::this_thread::sleep_for(std::chrono::hours(24));
  if (fault_.due("exit", step, rank_)) std::_Exit(9);
  if (fault_.due("extra-collective", step, rank_))
    group_->all_reduce(Tensor::zeros({3}), comm::ReduceOp::sum)->wait();
}

// A step whose loss or gradient was not finite on some rank: every rank stops (or, with
// --skip-nonfinite, skips it) at the same step, and the rank that found it names it.
void TrainingRun::report_nonfinite(const StepOutcome& outcome) {
  if (outcome.overflowed_scale > 0.0f) {
    // fp16's loss scale was too large: the expected back-off, which the scaler has made.
    ++result_.skipped_steps;
    if (!quiet_) {
      std::fprintf(stderr,
                   "step %ld: fp16 gradients overflowed at loss scale %g; step skipped, the "
                   "scale is now %g\n",
                   static_cast<long>(position_.step + 1), outcome.overflowed_scale,
                   scaler_->scale());
    }
    return;
  }
  const std::string& where = outcome.nonfinite;
  std::string what =
      where == "loss" ? fmt::format("the loss is {} on rank {}", outcome.loss, rank_)
      : !where.empty()
          ? fmt::format("the gradient of '{}' is not finite on rank {}", where, rank_)
          : fmt::format("the gradient of rank {} is not finite", outcome.comm.nonfinite_rank);
  PAC_CHECK(o_.skip_nonfinite, "step {}: {}; the run stops (--skip-nonfinite would skip the step)",
            position_.step + 1, what);
  ++result_.skipped_steps;
  if (!quiet_) {
    std::fprintf(stderr, "step %ld: %s; step skipped\n", static_cast<long>(position_.step + 1),
                 what.c_str());
  }
}

// Every rank evaluates a slice of the held-out data with rank 0's batch-norm statistics (the
// only state that differs between replicas), so no rank idles long enough to look dead.
EvalResult TrainingRun::evaluate() {
  MemoryTagScope tag(MemoryTag::evaluation);
  AutocastScope autocast(precision_);  // the model is evaluated as it trains
  if (recalibration_loader_) {
    recalibration_loader_->set_epoch(position_.epoch);
    nn::recalibrate_batch_norm(*model_, recalibrate_batches_, [&](int64_t b) {
      return recalibration_loader_->batch(b).inputs.to(model_device_);
    });
  }
  if (world_ > 1) {
    const uint64_t bytes_before = group_->bytes_sent();
    NoGradGuard no_grad;
    std::vector<comm::WorkPtr> pending;
    for (auto& [name, b] : model_->named_buffers()) pending.push_back(group_->broadcast(b, 0));
    for (auto& w : pending) w->wait();
    between_steps_.eval_bytes += group_->bytes_sent() - bytes_before;
  }
  return evaluate_run(*model_, data_, o_, config_, group_.get(), loader_threads());
}

StateDict TrainingRun::sync_state() const {
  StateDict state;
  if (outer_) {
    add_prefixed(state, "inner.", optimizer_->state());
    add_prefixed(state, "outer.", outer_->state());
  }
  return state;
}

// Every rank takes part (each contributes its compressor state); rank 0 writes the file while
// the others wait for it, allowed the time a slow disk would take on top of --comm-timeout, and
// every rank learns whether the write worked.
void TrainingRun::write_checkpoint() {
  const uint64_t bytes_before = group_->bytes_sent();
  RunState run = capture_run_state(*group_, reducer_.get(), o_.compress, pruner_.get(), sync_name_,
                                   sync_state());
  if (scaler_) run.grad_scaler = scaler_->state();
  if (world_ == 1) {
    save_checkpoint(o_.checkpoint, config_, *model_, optimizer_.get(), position_, o_.optimizer, run,
                    o_.recipe);
    return;
  }
  std::exception_ptr failure;
  if (leader_) {
    try {
      if (fault_.due("slow-checkpoint", position_.step, rank_))
        std::this_thread::sleep_for(std::chrono::seconds(3));
      save_checkpoint(o_.checkpoint, config_, *model_, optimizer_.get(), position_, o_.optimizer,
                      run, o_.recipe);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // A disk slower than 1 MB/s is taken for a hung one.
  StateDict rank_state = sync_state();
  if (reducer_) add_prefixed(rank_state, "compressor.", reducer_->compressor().state());
  const double allowance_s = checkpoint_bytes(*model_, optimizer_.get(), rank_state, world_) / 1e6;
  comm::TimeoutAllowance allowance(*group_, allowance_s);
  const bool any_failed = comm::any_rank_failed(*group_, failure != nullptr);
  between_steps_.checkpoint_bytes += group_->bytes_sent() - bytes_before;
  if (failure) std::rethrow_exception(failure);
  PAC_CHECK(!any_failed,
            "rank {}: rank 0 could not write the checkpoint {} (its error is on its output)", rank_,
            o_.checkpoint);
}

nlohmann::json TrainingRun::evaluation_record(const char* kind, int64_t epoch,
                                              const EvalResult& held) const {
  nlohmann::json record{{"kind", kind},
                        {"epoch", epoch},
                        {"step", position_.step},
                        {"test_loss", held.loss},
                        {"test_acc", held.accuracy},
                        {"wall_s", seconds_since(run_start_)}};
  // A language model's loss in bits per token (per character for a character vocabulary).
  if (data_.is_text()) record["bits_per_token"] = held.loss / std::numbers::ln2;
  return record;
}

// One step's record (docs/metrics.md says what each field means).
void TrainingRun::write_step_record(int64_t epoch, float loss, float lr, double step_s,
                                    const StepCost& cost, uint64_t passes, size_t allocations,
                                    int64_t samples) {
  const comm::ReducerStepStats& c = cost.comm;
  metrics_->write(
      {{"kind", "step"},
       {"step", position_.step},
       {"epoch", epoch},
       {"loss", loss},
       {"lr", lr},
       {"samples_per_s", samples / std::max(step_s, 1e-9) * world_},
       {"step_s", step_s},
       {"bytes_sent", c.bytes_sent},
       {"gradient_bytes", c.bytes_sent - c.verdict_bytes},
       {"verdict_bytes", c.verdict_bytes},
       {"pruning_bytes", cost.pruning_bytes},
       {"eval_bytes", cost.eval_bytes},
       {"checkpoint_bytes", cost.checkpoint_bytes},
       {"compute_s", std::max(0.0, step_s - c.comm_exposed_s - c.codec_s - cost.data_wait_s)},
       {"data_wait_s", cost.data_wait_s},
       {"codec_s", c.codec_s},
       {"comm_exposed_s", c.comm_exposed_s},
       {"outer_s", cost.outer_s},
       {"cpu_s", cost.cpu_s},
       {"communication_cpu_s", cost.communication_cpu_s},
       {"wakeups", cost.wakeups},
       {"exchanges", c.exchanges},
       {"exchanges_after_backward", c.exchanges_after_backward},
       {"codec_kernels", c.codec_kernels},
       {"gradient_passes", passes},
       {"allocations", allocations},
       {"gpu_bytes", device_.is_cpu() ? 0 : cuda_allocator_stats().current_bytes},
       {"gpu_peak_bytes", device_.is_cpu() ? 0 : cuda_allocator_stats().peak_bytes},
       {"density", pruner_ ? 1.0 - pruner_->sparsity() : 1.0},
       {"loss_scale", scaler_ ? scaler_->scale() : 1.0f},
       {"world_size", world_}});
}

// One line on the terminal, redrawn in place: steps, loss, throughput and time left.
void TrainingRun::draw_progress(int64_t epoch, int64_t b, float loss, double samples_per_s,
                                double eta_s) const {
  constexpr int width = 24;
  int filled = batches_ ? static_cast<int>(width * b / batches_) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\repoch %ld/%ld [%s] %ld/%ld loss %.4f %.0f samples/s ETA %d:%02d   ",
               static_cast<long>(epoch + 1), static_cast<long>(o_.epochs), bar.c_str(),
               static_cast<long>(b), static_cast<long>(batches_), loss, samples_per_s,
               static_cast<int>(eta_s) / 60, static_cast<int>(eta_s) % 60);
}

}  // namespace pac
