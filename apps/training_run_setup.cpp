// Set-up of a TrainingRun: data, model, optimizer, the data-parallel reducer, loaders, pruning,
// the synchronisation mode (and, in apps/training_run_resume.cpp, the run being continued). The
// order matters where random numbers are drawn (the model's initial weights first), so that a run
// and its resumed continuation, and every rank, draw alike.
#include <unistd.h>

#include <cstdlib>

#include "apps/training_run.h"
#include "comm/compressors/pactrain.h"
#include "core/allocator.h"
#include "core/cpu/threads.h"
#include "layers/batch_norm.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

namespace pac {

namespace {

// `gradient_has_momentum`: the compressor applies momentum to the gradient (DGC's momentum
// correction), so SGD's momentum moves the weight decay alone.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, nn::Module& model,
                                                 bool gradient_has_momentum) {
  optim::NamedParameters params = model.named_parameters();
  PAC_CHECK(o.optimizer == "adamw" || (o.beta1 == 0.9f && o.beta2 == 0.999f && o.decay_1d),
            "--beta1, --beta2 and --no-decay-1d apply to --optimizer adamw, not {}", o.optimizer);
  PAC_CHECK(o.optimizer == "sgd" || (o.momentum == 0.9f && !o.nesterov),
            "--momentum and --nesterov apply to --optimizer sgd, not {} (AdamW's moments are "
            "--beta1 and --beta2)",
            o.optimizer);
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::Sgd>(
        params, optim::SgdOptions{o.lr, o.momentum, 0.0f, o.weight_decay, o.nesterov,
                                  gradient_has_momentum});
  }
  if (o.optimizer == "adamw") {
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions{o.lr, o.beta1, o.beta2, 1e-8f, o.weight_decay, o.decay_1d});
  }
  PAC_FAIL("--optimizer '{}' is not known; expected sgd or adamw", o.optimizer);
}

// Every rank must run the same model, compressor, batch and sequence of collectives (how many
// steps, evaluations and checkpoints); a mismatch would hang or silently corrupt the run, so it
// is found at start-up by comparing a hash of the settings.
void check_ranks_agree(comm::ProcessGroup& group, const TrainOptions& o,
                       const models::ModelConfig& config) {
  if (group.size() == 1) return;
  std::string settings = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", model_config_json(config),
      o.compress, fmt::join(o.compress_options, ","), o.bucket_mb, o.first_bucket_mb, o.batch,
      o.optimizer, o.seed, o.prune, fmt::join(o.prune_options, ","), o.sparsity, o.prune_scope,
      o.prune_schedule, fmt::join(o.prune_exclude, ","), o.sync, o.sync_warmup, o.outer_lr,
      o.outer_momentum);
  settings += fmt::format("|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", o.data, o.epochs, o.max_steps,
                          o.train_subset, o.test_subset, o.synthetic_size, o.eval_every,
                          o.eval_iters, o.checkpoint_every, o.skip_nonfinite, o.recalibrate_bn,
                          o.allow_unused_parameters);
  PAC_CHECK(comm::all_ranks_equal(group, std::hash<std::string>{}(settings)),
            "rank {}: the ranks were started with different settings (model, data, --compress, "
            "--compress-opt, bucket sizes, --batch, --epochs, --max-steps, subsets, evaluation "
            "and checkpoint intervals, --optimizer, --seed, --sync or pruning); start every rank "
            "with the same command line",
            group.rank());
}

}  // namespace

TrainingRun::TrainingRun(TrainOptions options, std::string adapted, Device device,
                         comm::ProcessGroupPtr group)
    : o_(std::move(options)),
      adapted_(std::move(adapted)),
      device_(device),
      group_(std::move(group)),
      fault_(fault_from_environment()),
      rank_(group_->rank()),
      world_(group_->size()),
      leader_(rank_ == 0) {
  quiet_ = o_.quiet || !leader_;
  if (const char* prefix = std::getenv("PACTRAIN_TRACE_SAMPLES"); prefix && *prefix) {
    const std::string path = fmt::format("{}.rank{}", prefix, rank_);
    sample_trace_.reset(std::fopen(path.c_str(), "a"));
    PAC_CHECK(sample_trace_ != nullptr, "PACTRAIN_TRACE_SAMPLES: cannot append to {}", path);
  }
  if (o_.global_batch > 0) {
    PAC_CHECK(o_.global_batch % world_ == 0,
              "--global-batch {} does not divide among {} ranks; give a multiple of {}",
              o_.global_batch, world_, world_);
    o_.batch = o_.global_batch / world_;
  }
  precision_ = parse_precision(o_.precision);  // checked against the device in train()
  if (precision_ == Precision::fp16) {
    optim::GradScalerOptions scaling;
    scaling.init_scale = o_.loss_scale;
    scaling.growth_interval = o_.loss_scale_growth_interval;
    scaler_ = std::make_unique<optim::GradScaler>(scaling);
  }
  if (!device_.is_cpu()) {
    if (group_->backend() != "nccl") cuda_set_device(device_.index);
    cuda_set_tf32(o_.tf32);
  } else {
    PAC_CHECK(!o_.tf32, "--tf32 applies to GPU training; add --device cuda");
  }
  {
    MemoryTagScope tag(MemoryTag::data);
    data_ = load_run_data(o_);
  }
  config_ = resolve_model_config(o_.model, data_);
  build_model();
  build_data_parallel();
  build_loaders();
  build_pruner();
  build_sync();
  report_options_ = prune::ReportOptions{
      models::example_input_shape(config_),
      o_.bucket_mb,
      o_.first_bucket_mb,
      o_.compress_options.count("enc") && o_.compress_options.at("enc") != "auto"
          ? o_.compress_options.at("enc")
          : "fp32",
      world_,
      o_.compress == "pactrain" ? comm::pactrain_levels(o_.compress_options) : 1};
  resume();
  checkpointing_ = o_.checkpoint_every > 0 && !o_.checkpoint.empty();
  metrics_ = std::make_unique<MetricsWriter>(leader_ ? o_.metrics : "", !o_.resume.empty());
  // The first record: what ran, so that `pactrain train --config METRICS` runs it again.
  if (o_.resume.empty() && !o_.recipe.empty())
    metrics_->write({{"kind", "recipe"}, {"recipe", o_.recipe}});
  if (!o_.resume.empty()) {
    metrics_->write({{"kind", "resume"},
                     {"step", position_.step},
                     {"from_ranks", resumed_from_ranks_},
                     {"ranks", world_},
                     {"seconds", resume_seconds_.load + resume_seconds_.state},
                     {"load_s", resume_seconds_.load},
                     {"state_s", resume_seconds_.state}});
  }
  show_bar_ = !quiet_ && isatty(2);
  print_plan();
  const double ring_factor = world_ > 1 ? 2.0 * (world_ - 1) / world_ : 0.0;
  result_.dense_bytes_per_step =
      static_cast<double>(prune::bytes_per_step(*model_, report_options_).dense) * ring_factor;
}

// The model, its initial weights drawn alike on every rank's host, then moved to the device.
void TrainingRun::build_model() {
  MemoryTagScope tag(MemoryTag::weights);
  model_ = models::make_model(config_);
  model_->to(device_.is_cpu() ? device_ : Device::cuda(current_cuda_device()));
  model_device_ = model_->parameters().front()->data().device();
}

// The compressor and the Reducer that runs it (one rank with a compressor other than dense runs
// it too, which is how a single process measures one), and the optimizer, which must know
// whether the compressor moves the gradient with momentum of its own.
void TrainingRun::build_data_parallel() {
  std::unique_ptr<comm::Compressor> compressor;
  if (world_ > 1 || o_.compress != "dense")
    compressor = comm::make_compressor(o_.compress, o_.compress_options);
  gradient_has_momentum_ = compressor && compressor->applies_momentum();
  optimizer_ = make_optimizer(o_, *model_, gradient_has_momentum_);
  check_ranks_agree(*group_, o_, config_);
  if (compressor) {
    reducer_ = std::make_unique<comm::Reducer>(
        *model_, group_, std::move(compressor),
        comm::ReducerOptions{o_.bucket_mb, o_.first_bucket_mb, o_.allow_unused_parameters});
  }
}

// --loader-threads, or by default the cores this rank's share of the machine has left after its
// compute threads (the launcher says how many ranks share it: Open MPI's mpirun, MPICH's, or
// Slurm's srun); on a GPU the one thread that drives it.
int TrainingRun::loader_threads() const {
  if (o_.loader_threads >= 0) return o_.loader_threads;
  int local_ranks = 1;
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* value = std::getenv(name); value && std::atoi(value) > 0) {
      local_ranks = std::atoi(value);
      break;
    }
  }
  return data::default_loader_threads(device_.is_cpu() ? cpu::num_threads() : 1, local_ranks);
}

// This rank's training batches, the run's length and its learning-rate schedule.
void TrainingRun::build_loaders() {
  {
    MemoryTagScope tag(MemoryTag::data);
    // Two batches ahead: the next step's, and one to absorb a slow one. On a GPU the workers
    // make pinned batches for this rank's device.
    std::function<void()> on_worker_start;
    if (!device_.is_cpu())
      on_worker_start = [gpu = current_cuda_device()] { cuda_set_device(gpu); };
    auto source =
        make_train_loader(data_, o_, config_, rank_, world_, /*pinned=*/!device_.is_cpu());
    folder_loader_ = dynamic_cast<const data::ImageFolderLoader*>(source.get());
    loader_ =
        std::make_unique<data::Prefetcher>(std::move(source), loader_threads(), 2, on_worker_start);
  }
  batches_ = loader_->num_batches();
  PAC_CHECK(batches_ > 0, "{} training samples make no full batch of {}", data_.train_samples(),
            o_.batch);
  total_steps_ = o_.epochs * batches_;
  if (o_.max_steps > 0) total_steps_ = std::min(total_steps_, o_.max_steps);
  schedule_ = optim::parse_schedule(o_.schedule, o_.lr, total_steps_, o_.warmup, batches_);
}

void TrainingRun::build_pruner() {
  if (o_.prune.empty()) {
    PAC_CHECK(o_.prune_exclude.empty(), "--prune-exclude needs --prune");
    PAC_CHECK(o_.prune_options.empty(), "--prune-opt needs --prune");
    return;
  }
  pruner_ = std::make_unique<prune::Pruner>(
      *model_,
      prune::PrunerOptions{o_.prune, o_.sparsity, o_.prune_scope, o_.prune_schedule,
                           o_.prune_exclude, o_.seed, batches_, o_.prune_options},
      group_, reducer_.get());
}

// --sync local or diloco, and the batch-norm recalibration that DiLoCo needs before evaluating.
void TrainingRun::build_sync() {
  sync_options_ = parse_sync(o_.sync);
  // DiLoCo's outer step moves the weights past the average that the ranks' batch-norm statistics
  // were gathered under, so that evaluation mode no longer fits them: re-estimate them first, on
  // training batches that every rank draws alike (seeded by the epoch, so a resumed run draws the
  // same), before rank 0's are shared.
  PAC_CHECK(o_.recalibrate_bn >= -1, "--recalibrate-bn must be >= 0, got {}", o_.recalibrate_bn);
  recalibrate_batches_ =
      o_.recalibrate_bn >= 0 ? o_.recalibrate_bn : (sync_options_.kind == "diloco" ? 20 : 0);
  if (recalibrate_batches_ > 0 && !data_.is_text()) {
    TrainOptions drawn = o_;
    drawn.seed = o_.seed + 1;
    recalibration_loader_ = make_train_loader(data_, drawn, config_, 0, 1, false);
    // The default takes what a small training set has; a number given must be there.
    if (o_.recalibrate_bn < 0) {
      recalibrate_batches_ = std::min(recalibrate_batches_, recalibration_loader_->num_batches());
    }
    PAC_CHECK(recalibration_loader_->num_batches() >= recalibrate_batches_,
              "--recalibrate-bn {}: the training set has only {} batches of {}",
              recalibrate_batches_, recalibration_loader_->num_batches(), o_.batch);
  }
  if (sync_options_.kind == "step") return;
  PAC_CHECK(world_ > 1, "--sync {} needs data-parallel ranks (mpirun -np N ...)", o_.sync);
  PAC_CHECK(o_.eval_every == 0,
            "--eval-every with --sync {}: between synchronisations the ranks hold different "
            "models; evaluation follows every epoch",
            o_.sync);
  sync_options_.warmup = o_.sync_warmup;
  sync_options_.outer_lr = o_.outer_lr;
  sync_options_.outer_momentum = o_.outer_momentum;
  // Re-estimated before every evaluation, the batch-norm statistics need not travel.
  if (recalibration_loader_)
    sync_options_.unshared_buffers = nn::recalibrated_buffer_names(*model_);
  outer_ = std::make_unique<OuterSync>(*model_, *reducer_, group_, sync_options_,
                                       sync_options_.fragments > 0
                                           ? comm::make_compressor(o_.compress, o_.compress_options)
                                           : nullptr);
  // Under local SGD and DiLoCo each rank's optimizer has its own state, and the outer optimizer
  // its momentum: every checkpoint step is a synchronisation, after which these and the
  // parameters are all a resumed run needs.
  sync_name_ = sync_options_.fragments > 0
                   ? fmt::format("{}:{}:fragments={}", sync_options_.kind, sync_options_.every,
                                 sync_options_.fragments)
                   : fmt::format("{}:{}", sync_options_.kind, sync_options_.every);
}

// What is about to run, in a few lines (rank 0 only).
void TrainingRun::print_plan() const {
  if (quiet_) return;
  std::printf(
      "training %s (%ld parameters) on %s: %ld %s, %ld steps per epoch%s\n",
      model_->describe().c_str(), static_cast<long>(model_->num_parameters()), data_.name().c_str(),
      static_cast<long>(data_.train_samples()), data_.is_text() ? "training characters" : "samples",
      static_cast<long>(batches_),
      o_.resume.empty() ? "" : fmt::format(", resuming at step {}", position_.step).c_str());
  if (data_.is_folder()) {
    const data::ImageFolder& f = *data_.folder;
    std::printf(
        "image folder: %zu classes, %zu validation images; %ldx%ld inputs (RandomResizedCrop and "
        "flip; evaluation resizes to %ld and crops the centre)\n",
        f.classes.size(), f.val.size(), static_cast<long>(config_.image_size),
        static_cast<long>(config_.image_size), static_cast<long>(config_.image_size * 256 / 224));
    if (f.skipped > 0) {
      std::printf("image folder: skipped %ld files that are not JPEG or PNG (the first: %s)\n",
                  static_cast<long>(f.skipped), f.first_skipped.c_str());
    }
  }
  if (reducer_) {
    std::printf("data parallel: %d rank(s) over %s, compressor %s, %zu gradient buckets\n", world_,
                group_->backend().c_str(), o_.compress.c_str(), reducer_->buckets().size());
  }
  if (gradient_has_momentum_ && o_.momentum > 0.0f) {
    std::printf(
        "optimizer: sgd's momentum %g moves the weight decay only (the compressor's "
        "momentum correction moves the gradient)\n",
        static_cast<double>(o_.momentum));
  }
  if (!adapted_.empty()) {
    std::printf("compressor: pactrain with adamw: %s (AdamW's defaults; set them to override)\n",
                adapted_.c_str());
  }
  if (loader_->threads() > 0) {
    std::printf("loading: %d thread(s) make the next batches while a step runs\n",
                loader_->threads());
  }
  if (pruner_) std::printf("pruning: %s\n", pruner_->describe().c_str());
  if (recalibration_loader_) {
    std::printf("evaluation: batch-norm statistics re-estimated on %ld training batches first\n",
                static_cast<long>(recalibrate_batches_));
  }
}

}  // namespace pac
