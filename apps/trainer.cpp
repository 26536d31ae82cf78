// The training loop: train() starts the process group, then a TrainingRun (apps/training_run.h)
// runs epochs of steps, each step a short sequence of named phases. Set-up is in
// training_run_setup.cpp, the phases in training_run_phases.cpp, the step itself (forward,
// backward, reduce, update) in train_step.cpp.
#include "apps/trainer.h"

#include <cstdio>
#include <numbers>
#include <thread>
#include <utility>

#include "apps/training_run.h"
#include "core/allocator.h"
#include "core/cpu/threads.h"
#include "core/cpu_time.h"
#include "core/generator.h"

namespace pac {

namespace {

// pactrain's ternary defaults (error feedback, codes in -3..3) are SGD's. With AdamW, error
// feedback's bursts and a coarse code's variance both enter Adam's second moment: on gpt-nano at
// 80% they ended 0.125 above fp32 values, and `levels=15 ef=0` 0.018 above
// (docs/language-models.md). So with AdamW those are the defaults of a ternary pactrain; what the
// user set is kept. Returns what was chosen, for the log ("" when nothing).
std::string adapt_compressor_to_optimizer(TrainOptions& o) {
  if (o.compress != "pactrain" || o.optimizer != "adamw") return "";
  auto enc = o.compress_options.find("enc");
  if (enc == o.compress_options.end() || (enc->second != "ternary" && enc->second != "auto")) {
    return "";
  }
  std::vector<std::string> chosen;
  for (auto [key, value] : {std::pair<const char*, const char*>{"levels", "15"}, {"ef", "0"}}) {
    if (o.compress_options.count(key)) continue;
    o.compress_options[key] = value;
    chosen.push_back(fmt::format("{}={}", key, value));
  }
  return fmt::format("{}", fmt::join(chosen, " "));
}

}  // namespace

TrainResult train(const TrainOptions& options) {
  TrainOptions o = options;
  const std::string adapted = adapt_compressor_to_optimizer(o);
  PAC_CHECK(o.epochs > 0, "--epochs must be positive, got {}", o.epochs);
  PAC_CHECK(o.batch > 0, "--batch must be positive, got {}", o.batch);
  PAC_CHECK(o.max_steps >= 0, "--max-steps must be >= 0, got {}", o.max_steps);
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  cpu::set_num_threads(std::max(1, threads));
  default_generator().manual_seed(o.seed);

  const Device device = Device::parse(o.device);
  const Precision precision = parse_precision(o.precision);
  PAC_CHECK(precision == Precision::fp32 || device.is_cpu(),
            "--precision {} runs on the CPU reference path only: its GPU kernels (cuBLAS and "
            "cuDNN in {}) are not built yet; on a GPU, train in fp32 (--tf32 for tensor cores)",
            o.precision, o.precision);
  const TrainOptions defaults;
  PAC_CHECK(precision == Precision::fp16 ||
                (o.loss_scale == defaults.loss_scale &&
                 o.loss_scale_growth_interval == defaults.loss_scale_growth_interval),
            "--loss-scale and --loss-scale-growth-interval apply to --precision fp16 only; this "
            "run is {}",
            o.precision);
  // Between synchronisations each rank would skip its own overflowing steps and halve its own
  // scale, so the ranks' scales would part, and a checkpoint keeps one.
  PAC_CHECK(precision != Precision::fp16 || o.sync == "step",
            "--precision fp16 needs --sync step: its loss scale must stay the same on every rank, "
            "and with --sync {} each rank would back off on its own; use --precision bf16, which "
            "needs no loss scaling",
            o.sync);
  if (!device.is_cpu()) {
    PAC_CHECK(cuda_compiled(), "--device {}: this build has no CUDA backend", o.device);
    PAC_CHECK(cuda_device_count() > 0, "--device {}: no GPU is visible", o.device);
  }
  // Under mpirun on GPUs, the NCCL group picks the GPU of the local rank itself.
  comm::ProcessGroupPtr group = comm::make_process_group(o.backend, device);
  group->set_timeout(o.comm_timeout);
  PAC_CHECK(o.packed_wire == "coded" || group->backend() == "mpi",
            "--packed-wire {}: only the mpi backend chooses how packed sums travel (the {} group "
            "{}); leave the option out",
            o.packed_wire, group->backend(),
            group->backend() == "nccl" ? "adds the stored words" : "sends nothing");
  group->set_packed_wire(o.packed_wire == "fields" ? comm::PackedWire::fields
                                                   : comm::PackedWire::coded);
  try {
    return TrainingRun(o, adapted, device, group).run();
  } catch (const std::exception& e) {
    if (group->size() == 1) throw;
    // A rank that fails alone (a local step's NaN, a checkpoint it could not write) must say why
    // before anything waits for the others: unwinding ends in MPI_Finalize, which waits for every
    // rank, and mpirun would stop this one before main printed the error (or, with no
    // communication timeout, wait forever). So it prints here and ends at once, without
    // finalizing; mpirun sees a rank end with an error and stops the job.
    std::fprintf(stderr, "pactrain: rank %d: %s\n", group->rank(), e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

TrainResult TrainingRun::run() {
  model_->train();
  for (int64_t epoch = position_.epoch; epoch < o_.epochs && position_.step < total_steps_;
       ++epoch) {
    loader_->set_epoch(epoch);
    EpochTotals totals;
    totals.first_batch = epoch == position_.epoch ? position_.batch : 0;
    for (int64_t b = totals.first_batch; b < batches_ && position_.step < total_steps_; ++b)
      run_step(epoch, b, totals);
    end_epoch(epoch, totals);
  }
  finish();
  return result_;
}

// One step and what surrounds it: a pruning event, the step itself, a synchronisation, its
// record, and an evaluation or a checkpoint when one is due after it.
void TrainingRun::run_step(int64_t epoch, int64_t b, EpochTotals& totals) {
  auto step_start = Clock::now();
  const double cpu_before = process_cpu_seconds();
  const double communication_cpu_before = group_->communication_cpu_s();
  const uint64_t wakeups_before = group_->wakeups();
  const size_t allocations_before = cpu_allocator_stats().allocations;
  const uint64_t passes_before = counted_passes();
  const float lr = schedule_->lr(position_.step);
  optimizer_->set_lr(lr);
  const data::Batch batch = load_batch(b);

  // What the group sent since the last step's record (evaluations, checkpoints) counts here.
  StepCost cost = std::exchange(between_steps_, StepCost{});
  cost.data_wait_s = loader_->take_wait_seconds();
  prune::PruneStep pruned;
  if (pruner_) pruned = pruning_event(batch, cost);
  inject_faults();
  StepSettings settings{o_.label_smoothing, o_.clip_grad, nullptr,
                        fault_.due("nan-loss", position_.step, rank_)};
  if (pruner_) settings.after_reduce = [&] { pruner_->observe(); };
  settings.precision = precision_;
  settings.scaler = scaler_.get();
  // A local step (local SGD, DiLoCo) reduces nothing: this rank checks its own gradients.
  const bool local = outer_ && outer_->begin_step(position_.step);
  const StepOutcome outcome =
      train_step(*model_, params_, *optimizer_, local ? nullptr : reducer_.get(), batch, settings);
  cost.comm.bytes_sent += outcome.comm.bytes_sent;
  cost.comm.verdict_bytes += outcome.comm.verdict_bytes;
  cost.comm.codec_s += outcome.comm.codec_s;
  cost.comm.comm_exposed_s += outcome.comm.comm_exposed_s;
  cost.comm.codec_kernels += outcome.comm.codec_kernels;
  cost.comm.exchanges += outcome.comm.exchanges;
  cost.comm.exchanges_after_backward += outcome.comm.exchanges_after_backward;
  if (local && outer_->turn_due(position_.step + 1)) {
    // Streaming DiLoCo: a fragment's turn, its all-reduce left running behind the next steps;
    // what the turn waits for the one in flight is its exposed communication.
    auto turn_start = Clock::now();
    comm::ReducerStepStats turn = outer_->after_local_step(position_.step + 1);
    const double turn_s = seconds_since(turn_start);
    cost.outer_s += turn_s;
    cost.comm.bytes_sent += turn.bytes_sent;
    cost.comm.verdict_bytes += turn.verdict_bytes;
    cost.comm.comm_exposed_s += turn_s;
  }
  // The end of a period: the ranks agree again. The end of an epoch, a checkpoint step or the
  // run too, and there on the buffers as well, so that the model evaluated and saved is the
  // ranks' common one.
  const bool read_next = b + 1 == batches_ || position_.step + 1 == total_steps_ ||
                         (checkpointing_ && (position_.step + 1) % o_.checkpoint_every == 0);
  if (outer_ && outer_->pending() > 0 && (outer_->due(position_.step + 1) || read_next))
    synchronise(read_next, cost);
  if (reducer_ && pruned.pruned && !quiet_ && !show_bar_) {
    std::string plan = reducer_->compressor().describe_buckets();
    if (!plan.empty()) std::printf("  %s\n", plan.c_str());
  }
  if (outcome.skipped) report_nonfinite(outcome);

  ++position_.step;
  position_.epoch = b + 1 == batches_ ? epoch + 1 : epoch;
  position_.batch = b + 1 == batches_ ? 0 : b + 1;
  if (!outcome.skipped) {
    totals.loss_sum += outcome.loss;
    ++totals.loss_count;
  }
  ++totals.steps;
  totals.bytes_sum += static_cast<double>(cost.comm.bytes_sent);
  totals.samples += static_cast<double>(batch.targets.numel() * world_);

  const double step_s = seconds_since(step_start);
  cost.cpu_s = process_cpu_seconds() - cpu_before;
  cost.communication_cpu_s = group_->communication_cpu_s() - communication_cpu_before;
  cost.wakeups = group_->wakeups() - wakeups_before;
  if (position_.step % o_.log_every == 0 || b + 1 == batches_ || position_.step == total_steps_ ||
      cost.outer_s > 0.0) {
    write_step_record(epoch, outcome.loss, lr, step_s, cost, counted_passes() - passes_before,
                      cpu_allocator_stats().allocations - allocations_before,
                      batch.targets.numel());
  }
  if (show_bar_) {
    const double per_step = seconds_since(totals.start) / (b + 1 - totals.first_batch);
    draw_progress(epoch, b + 1, outcome.loss,
                  batch.targets.numel() / std::max(step_s, 1e-9) * world_,
                  per_step * (total_steps_ - position_.step));
  }
  // --eval-every, unless the epoch's own evaluation follows at once.
  if (o_.eval_every > 0 && position_.step % o_.eval_every == 0 && b + 1 < batches_ &&
      position_.step < total_steps_) {
    EvalResult held = evaluate();
    metrics_->write(evaluation_record("eval", epoch, held));
    if (!quiet_) {
      if (show_bar_) std::fprintf(stderr, "\n");
      std::printf("step %ld: %s loss %.4f (%.3f bits per token), accuracy %.2f%%\n",
                  static_cast<long>(position_.step), data_.is_text() ? "validation" : "test",
                  held.loss, held.loss / std::numbers::ln2, 100.0 * held.accuracy);
      std::fflush(stdout);
    }
  }
  if (checkpointing_ && position_.step % o_.checkpoint_every == 0) {
    if (fault_.due("kill-in-checkpoint", position_.step, rank_)) arm_checkpoint_kill();
    write_checkpoint();
  }
  // What this step left in the caches and the next one will not take (a mask change's old
  // buffers, say) goes back to the system.
  cpu_release_idle_blocks();
  if (!device_.is_cpu()) cuda_release_idle_blocks();
}

// The epoch's evaluation, its record and its line.
void TrainingRun::end_epoch(int64_t epoch, const EpochTotals& totals) {
  if (show_bar_) std::fprintf(stderr, "\n");
  result_.train_loss = totals.loss_count ? totals.loss_sum / totals.loss_count : 0.0;
  result_.bytes_per_step = totals.steps ? totals.bytes_sum / totals.steps : 0.0;
  result_.samples_per_s = totals.samples / std::max(seconds_since(totals.start), 1e-9);
  result_.test = evaluate();
  if (folder_loader_ && folder_loader_->corrupt_skipped() > corrupt_reported_) {
    corrupt_reported_ = folder_loader_->corrupt_skipped();
    std::fprintf(
        stderr,
        "rank %d: --skip-corrupt-images: %ld training images could not be decoded so far and "
        "were replaced by the next of the epoch (the first: "
        "%s)\n",
        rank_, static_cast<long>(corrupt_reported_), folder_loader_->first_corrupt().c_str());
  }
  if (!leader_) return;
  nlohmann::json record = evaluation_record("epoch", epoch, result_.test);
  record["train_loss"] = result_.train_loss;
  // Over every step of the epoch: the step records are a sample (--log-every), which with
  // --sync would over-count the steps that synchronise.
  record["bytes_per_step"] = result_.bytes_per_step;
  metrics_->write(record);
  if (!quiet_) {
    const char* held_out = data_.is_text() ? "validation" : "test";
    std::printf("epoch %ld: train loss %.4f, %s loss %.4f, %s accuracy %.2f%% (%.0f s)\n",
                static_cast<long>(epoch + 1), result_.train_loss, held_out, result_.test.loss,
                held_out, 100.0 * result_.test.accuracy, seconds_since(totals.start));
    std::fflush(stdout);
  }
}

// The last checkpoint, the memory record and, on several ranks, the bytes against dense's.
void TrainingRun::finish() {
  if (!o_.checkpoint.empty()) write_checkpoint();
  // Where the bytes went: always in the metrics, printed with --memory-report.
  metrics_->write(memory_record(device_));
  if (o_.memory_report && leader_) std::printf("\n%s", memory_report_text(device_).c_str());
  result_.steps = position_.step;
  result_.density = pruner_ ? 1.0 - pruner_->sparsity() : 1.0;
  if (!leader_ || quiet_) return;
  if (world_ == 1) {
    std::printf("\ntest accuracy %.2f%%, %.0f samples/s, density %.1f%%\n",
                100.0 * result_.test.accuracy, result_.samples_per_s, 100.0 * result_.density);
    return;
  }
  std::printf("\n%-16s %-12s %-10s %-10s %-22s %s\n", "compressor", "test acc", "samples/s",
              "density", "bytes/step (per rank)", "dense would send");
  std::printf("%-16s %-12s %-10.0f %-10s %-22.0f %.0f (%.3fx)\n", o_.compress.c_str(),
              fmt::format("{:.2f}%", 100.0 * result_.test.accuracy).c_str(), result_.samples_per_s,
              fmt::format("{:.1f}%", 100.0 * result_.density).c_str(), result_.bytes_per_step,
              result_.dense_bytes_per_step,
              result_.dense_bytes_per_step > 0
                  ? result_.bytes_per_step / result_.dense_bytes_per_step
                  : 0.0);
}

}  // namespace pac
