// TrainingRun: one `pactrain train` run in its process group. Set-up builds everything the
// options ask for (apps/training_run_setup.cpp); the loop in apps/trainer.cpp then calls the
// phases by name: a step, a pruning event, a synchronisation, an evaluation, a checkpoint, the
// metrics records (apps/training_run_phases.cpp).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/checkpoint.h"
#include "apps/data/loader.h"
#include "apps/data/prefetch.h"
#include "apps/faults.h"
#include "apps/metrics.h"
#include "apps/outer_sync.h"
#include "apps/run_data.h"
#include "apps/train_step.h"
#include "apps/trainer.h"
#include "comm/reducer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "prune/pruner.h"
#include "prune/report.h"

namespace pac {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t);

// What one step cost on the wire and in time: its own collectives and any synchronisation it
// ran; and apart from those, what the group sent for other purposes since the step before.
struct StepCost {
  comm::ReducerStepStats comm;
  double outer_s = 0.0;           // synchronisations (local SGD, DiLoCo) and streaming turns
  uint64_t pruning_bytes = 0;     // a pruning event's scores, masks and checks
  uint64_t eval_bytes = 0;        // the batch-norm buffers shared before an evaluation
  uint64_t checkpoint_bytes = 0;  // per-rank state gathered to rank 0, and the verdict
  double data_wait_s = 0.0;       // the step waiting for its batch (made ahead, or made then)
  // CPU this step: the whole process's, and of it the communication thread's, with the times
  // that thread woke to poll; where ranks share cores, what communication took from compute.
  double cpu_s = 0.0, communication_cpu_s = 0.0;
  uint64_t wakeups = 0;
};

// Sums over an epoch, for its record and the run's result.
struct EpochTotals {
  Clock::time_point start = Clock::now();
  double loss_sum = 0.0, bytes_sum = 0.0, samples = 0.0;
  int64_t loss_count = 0;  // applied steps, whose losses the mean takes
  int64_t steps = 0;       // every step, skipped ones too: each sent its bytes
  int64_t first_batch = 0;
};

class TrainingRun {
 public:
  // Builds the run; `adapted` is what train() chose for the compressor (for the log).
  TrainingRun(TrainOptions options, std::string adapted, Device device,
              comm::ProcessGroupPtr group);
  TrainResult run();  // apps/trainer.cpp

 private:
  // The loop (apps/trainer.cpp).
  void run_step(int64_t epoch, int64_t b, EpochTotals& totals);
  void end_epoch(int64_t epoch, const EpochTotals& totals);
  void finish();

  // Set-up (apps/training_run_setup.cpp).
  void build_model();
  void build_data_parallel();
  void build_loaders();
  int loader_threads() const;
  void build_pruner();
  void build_sync();
  void print_plan() const;

  // --resume (apps/training_run_resume.cpp).
  void resume();
  void change_global_batch(int64_t saved_global);

  // Phases (apps/training_run_phases.cpp).
  data::Batch load_batch(int64_t b);
  prune::PruneStep pruning_event(const data::Batch& batch, StepCost& cost);
  void synchronise(bool with_buffers, StepCost& cost);
  void inject_faults() const;
  void report_nonfinite(const StepOutcome& outcome);
  EvalResult evaluate();
  void write_checkpoint();
  StateDict sync_state() const;
  nlohmann::json evaluation_record(const char* kind, int64_t epoch, const EvalResult& held) const;
  void write_step_record(int64_t epoch, float loss, float lr, double step_s, const StepCost& cost,
                         uint64_t passes, size_t allocations, int64_t samples);
  void draw_progress(int64_t epoch, int64_t b, float loss, double samples_per_s,
                     double eta_s) const;

  TrainOptions o_;
  const std::string adapted_;
  const Device device_;
  const comm::ProcessGroupPtr group_;
  const Fault fault_;
  const int rank_, world_;
  const bool leader_;  // rank 0: prints, writes metrics and checkpoints
  bool quiet_ = false, show_bar_ = false;
  // PACTRAIN_TRACE_SAMPLES=PREFIX: this rank appends each step's samples to PREFIX.rank<r>.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> sample_trace_{nullptr, &std::fclose};

  RunData data_;
  models::ModelConfig config_;
  nn::ModulePtr model_;
  Device model_device_;
  optim::NamedParameters params_;  // built once: the per-step checks walk the same list
  std::unique_ptr<optim::Optimizer> optimizer_;
  Precision precision_ = Precision::fp32;      // --precision
  std::unique_ptr<optim::GradScaler> scaler_;  // fp16's loss scaling, null otherwise
  bool gradient_has_momentum_ = false;         // the compressor moves the gradient (DGC)
  std::unique_ptr<comm::Reducer> reducer_;

  std::unique_ptr<data::Prefetcher> loader_;
  // The image-folder loader inside loader_, for its count of corrupt files skipped (or null).
  const data::ImageFolderLoader* folder_loader_ = nullptr;
  int64_t corrupt_reported_ = 0;
  int64_t batches_ = 0, total_steps_ = 0;
  std::unique_ptr<optim::Schedule> schedule_;

  std::unique_ptr<prune::Pruner> pruner_;
  prune::ReportOptions report_options_;

  SyncOptions sync_options_;
  std::string sync_name_ = "step";  // as checkpoints record it
  std::unique_ptr<OuterSync> outer_;
  int64_t recalibrate_batches_ = 0;
  std::unique_ptr<data::BatchSource> recalibration_loader_;

  RunPosition position_;
  int64_t resumed_from_ranks_ = 0;  // --resume: the checkpoint's number of ranks
  struct {
    double load = 0.0;   // reading the file into the model and optimizer, on this rank
    double state = 0.0;  // putting back (or mapping) the ranks' own state
  } resume_seconds_;
  bool checkpointing_ = false;  // every --checkpoint-every steps
  std::unique_ptr<MetricsWriter> metrics_;
  StepCost between_steps_;  // evaluations' and checkpoints' traffic, for the next step's record
  TrainResult result_;
  Clock::time_point run_start_ = Clock::now();
};

}  // namespace pac
