// The training and evaluation loops behind `pactrain train` and `pactrain eval`, usable from C++
// directly (the tests resume runs through them).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "apps/models/registry.h"
#include "apps/run_data.h"
#include "comm/process_group.h"
#include "layers/module.h"

namespace pac {

struct TrainOptions {
  models::ModelConfig model;  // in_channels, num_classes, image_size: 0 = take from the data
  std::string data = "fashion-mnist";
  std::string data_dir;      // empty: the data set's default folder
  int64_t train_subset = 0;  // > 0: use only the first N training samples
  int64_t test_subset = 0;   // > 0: evaluate on the first N test samples
  int64_t synthetic_size = 4096;
  std::string text_file;       // --data text
  bool coarse_labels = false;  // --data cifar100: the 20 superclasses
  // --data imagefolder: a file that cannot be decoded is skipped (and counted) instead of an error
  bool skip_corrupt_images = false;
  // Evaluate every N steps as well as after every epoch (0: epochs only), on M batches of
  // validation windows for text (0: all of them).
  int64_t eval_every = 0, eval_iters = 0;

  int64_t epochs = 10, max_steps = 0, batch = 128;  // batch: per rank
  // > 0: the batch of all ranks together; each rank's is global_batch / ranks, which must divide.
  int64_t global_batch = 0;
  std::string optimizer = "sgd";
  float lr = 0.1f, momentum = 0.9f, weight_decay = 5e-4f;
  float beta1 = 0.9f, beta2 = 0.999f;  // AdamW
  bool decay_1d = true;  // false: no weight decay on 1-D parameters (biases, norms), as nanoGPT
  bool nesterov = false;
  std::string schedule = "constant";
  int64_t warmup = 0;
  float label_smoothing = 0.0f, clip_grad = 0.0f;
  int64_t crop_padding = 0;
  bool flip = false;

  std::string device = "cpu";  // cpu, cuda or cuda:N (under mpirun: the GPU of the local rank)
  bool tf32 = false;           // GPU: TF32 tensor cores for fp32 GEMM and convolution
  // fp32, bf16 or fp16: products in that precision under autocast (core/autocast.h), fp16 with
  // dynamic loss scaling (optim/grad_scaler.h).
  std::string precision = "fp32";
  // fp16: the initial loss scale, and the finite steps in a row after which it doubles.
  float loss_scale = 65536.0f;
  int64_t loss_scale_growth_interval = 2000;

  // Data-parallel training (mpirun -np N pactrain train ...).
  std::string backend = "auto";
  std::string compress = "dense";
  std::map<std::string, std::string> compress_options;
  double bucket_mb = 25.0, first_bucket_mb = 1.0;
  // How packed codes travel between MPI ranks: coded (Rice codes where shorter) or fields.
  std::string packed_wire = "coded";
  bool allow_unused_parameters = false;
  double comm_timeout = 60.0;   // seconds one collective may wait before the peers count as dead
  bool skip_nonfinite = false;  // skip a step whose loss or gradient is NaN/Inf instead of stopping
  // How often the ranks agree (apps/outer_sync.h): step, local:H or diloco:H.
  std::string sync = "step";
  int64_t sync_warmup = 0;
  float outer_lr = 0.7f, outer_momentum = 0.9f;
  // Training batches on which batch-norm statistics are re-estimated before each evaluation
  // (nn::recalibrate_batch_norm); -1: 20 with --sync diloco (whose outer step moves the weights
  // past the statistics), else none.
  int64_t recalibrate_bn = -1;

  // Pruning (prune/): a criterion name turns it on.
  std::string prune;
  double sparsity = 0.5;
  std::map<std::string, std::string> prune_options;  // --prune-opt, read by the criterion
  std::string prune_scope;  // empty: the criterion's choice (global if it needs it, else layer)
  std::string prune_schedule = "oneshot:0";
  std::vector<std::string> prune_exclude;

  uint64_t seed = 0;
  int threads = 0;          // 0: every core
  int loader_threads = -1;  // batches made ahead of the step; -1: the cores --threads leaves
  std::string metrics, checkpoint, resume;
  // Resume from a checkpoint trained with another global batch (its schedule moves; see resume).
  bool allow_batch_change = false;
  int64_t checkpoint_every = 0;
  int64_t log_every = 50;
  bool quiet = false;
  // At the end, print where the allocators' bytes went (core/memory_stats.h); the metrics get
  // the same numbers either way.
  bool memory_report = false;
  // The run's options as a recipe (apps/recipe.h), recorded in the metrics file and checkpoints
  // so that either reruns it; empty when the run was not started from the command line.
  std::string recipe;
};

struct TrainResult {
  EvalResult test;          // the last evaluation: test set, or validation text
  double train_loss = 0.0;  // mean over the last epoch's steps
  int64_t steps = 0;
  double samples_per_s = 0.0;   // all ranks together, over the last epoch
  double bytes_per_step = 0.0;  // gradient bytes this rank sent per step, last epoch, measured
  double dense_bytes_per_step = 0.0;  // what dense fp32 all-reduce sends per step per rank
  double density = 1.0;               // kept fraction of the prunable weights (1 without pruning)
  int64_t skipped_steps = 0;          // steps with a non-finite loss or gradient (--skip-nonfinite)
};

TrainResult train(const TrainOptions& options);

}  // namespace pac
