#include "apps/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numbers>
#include <thread>

#include "apps/checkpoint.h"
#include "apps/data/loader.h"
#include "apps/faults.h"
#include "apps/metrics.h"
#include "apps/outer_sync.h"
#include "apps/train_step.h"
#include "comm/compressors/pactrain.h"
#include "comm/reducer.h"
#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cpu/threads.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/batch_norm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "prune/mask_sync.h"
#include "prune/pruner.h"
#include "prune/report.h"

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

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One line on the terminal, redrawn in place: steps, loss, throughput and time left.
void draw_progress(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, float loss,
                   double samples_per_s, double eta_s) {
  constexpr int width = 24;
  int filled = batches ? static_cast<int>(width * batch / batches) : width;
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\repoch %ld/%ld [%s] %ld/%ld loss %.4f %.0f samples/s ETA %d:%02d   ",
               static_cast<long>(epoch + 1), static_cast<long>(epochs), bar.c_str(),
               static_cast<long>(batch), static_cast<long>(batches), loss, samples_per_s,
               static_cast<int>(eta_s) / 60, static_cast<int>(eta_s) % 60);
}

// Gives every cached block back to the system: before and after a pruning event, so that its
// working set and the training step's are never held at once. (Evaluation needs none of this: it
// runs in the training batch's shapes and reuses the step's blocks.)
void release_cached_memory(Device device) {
  cpu_empty_cache();
  if (!device.is_cpu()) cuda_empty_cache();
}

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

// Everything after the process group exists: the run itself.
TrainResult train_in_group(TrainOptions& o, const std::string& adapted, Device device,
                           const comm::ProcessGroupPtr& group);

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
  if (!device.is_cpu()) {
    PAC_CHECK(cuda_compiled(), "--device {}: this build has no CUDA backend", o.device);
    PAC_CHECK(cuda_device_count() > 0, "--device {}: no GPU is visible", o.device);
  }
  // Under mpirun on GPUs, the NCCL group picks the GPU of the local rank itself.
  comm::ProcessGroupPtr group = comm::make_process_group(o.backend, device);
  group->set_timeout(o.comm_timeout);
  try {
    return train_in_group(o, adapted, device, group);
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

namespace {

TrainResult train_in_group(TrainOptions& o, const std::string& adapted, Device device,
                           const comm::ProcessGroupPtr& group) {
  if (!device.is_cpu()) {
    if (group->backend() != "nccl") cuda_set_device(device.index);
    cuda_set_tf32(o.tf32);
  } else {
    PAC_CHECK(!o.tf32, "--tf32 applies to GPU training; add --device cuda");
  }
  const Fault fault = fault_from_environment();
  const int rank = group->rank(), world = group->size();
  const bool leader = rank == 0;  // prints, writes metrics and checkpoints

  const RunData run_data = [&] {
    MemoryTagScope tag(MemoryTag::data);
    return load_run_data(o);
  }();
  models::ModelConfig config = resolve_model_config(o.model, run_data);
  nn::ModulePtr model = [&] {
    MemoryTagScope tag(MemoryTag::weights);
    nn::ModulePtr made = models::make_model(config);
    // Every rank draws the same initial weights on the host; then the model moves.
    made->to(device.is_cpu() ? device : Device::cuda(current_cuda_device()));
    return made;
  }();
  std::unique_ptr<comm::Compressor> compressor;
  if (world > 1 || o.compress != "dense") {
    compressor = comm::make_compressor(o.compress, o.compress_options);
  }
  const bool gradient_has_momentum = compressor && compressor->applies_momentum();
  auto optimizer = make_optimizer(o, *model, gradient_has_momentum);

  const Device model_device = model->parameters().front()->data().device();
  check_ranks_agree(*group, o, config);
  std::unique_ptr<comm::Reducer> reducer;
  if (compressor) {
    reducer = std::make_unique<comm::Reducer>(
        *model, group, std::move(compressor),
        comm::ReducerOptions{o.bucket_mb, o.first_bucket_mb, o.allow_unused_parameters});
  }

  std::unique_ptr<data::BatchSource> loader = [&] {
    MemoryTagScope tag(MemoryTag::data);
    return make_train_loader(run_data, o, config, rank, world, /*pinned=*/!device.is_cpu());
  }();
  int64_t batches = loader->num_batches();
  PAC_CHECK(batches > 0, "{} training samples make no full batch of {}", run_data.train.size(),
            o.batch);
  int64_t total_steps = o.epochs * batches;
  if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
  auto schedule = optim::parse_schedule(o.schedule, o.lr, total_steps, o.warmup);

  std::unique_ptr<prune::Pruner> pruner;
  if (!o.prune.empty()) {
    pruner = std::make_unique<prune::Pruner>(
        *model,
        prune::PrunerOptions{o.prune, o.sparsity, o.prune_scope, o.prune_schedule, o.prune_exclude,
                             o.seed, batches, o.prune_options},
        group, reducer.get());
  } else {
    PAC_CHECK(o.prune_exclude.empty(), "--prune-exclude needs --prune");
    PAC_CHECK(o.prune_options.empty(), "--prune-opt needs --prune");
  }
  SyncOptions sync_options = parse_sync(o.sync);
  // DiLoCo's outer step moves the weights past the average that the ranks' batch-norm statistics
  // were gathered under, so that evaluation mode no longer fits them: re-estimate them first, on
  // training batches that every rank draws alike (seeded by the epoch, so a resumed run draws the
  // same), before rank 0's are shared.
  PAC_CHECK(o.recalibrate_bn >= -1, "--recalibrate-bn must be >= 0, got {}", o.recalibrate_bn);
  int64_t recalibrate_batches =
      o.recalibrate_bn >= 0 ? o.recalibrate_bn : (sync_options.kind == "diloco" ? 20 : 0);
  std::unique_ptr<data::Loader> recalibration_loader;
  if (recalibrate_batches > 0 && !run_data.is_text()) {
    recalibration_loader = std::make_unique<data::Loader>(
        run_data.train,
        data::LoaderOptions{o.batch, true, o.seed + 1, 0, 1, true, o.crop_padding, o.flip, false});
    // The default takes what a small training set has; a number given must be there.
    if (o.recalibrate_bn < 0) {
      recalibrate_batches = std::min(recalibrate_batches, recalibration_loader->num_batches());
    }
    PAC_CHECK(recalibration_loader->num_batches() >= recalibrate_batches,
              "--recalibrate-bn {}: the training set has only {} batches of {}",
              recalibrate_batches, recalibration_loader->num_batches(), o.batch);
  }
  std::unique_ptr<OuterSync> outer;
  if (sync_options.kind != "step") {
    PAC_CHECK(world > 1, "--sync {} needs data-parallel ranks (mpirun -np N ...)", o.sync);
    PAC_CHECK(o.eval_every == 0,
              "--eval-every with --sync {}: between synchronisations the ranks hold different "
              "models; evaluation follows every epoch",
              o.sync);
    sync_options.warmup = o.sync_warmup;
    sync_options.outer_lr = o.outer_lr;
    sync_options.outer_momentum = o.outer_momentum;
    // Re-estimated before every evaluation, the batch-norm statistics need not travel.
    if (recalibration_loader) sync_options.unshared_buffers = nn::recalibrated_buffer_names(*model);
    outer = std::make_unique<OuterSync>(*model, *reducer, group, sync_options,
                                        sync_options.fragments > 0
                                            ? comm::make_compressor(o.compress, o.compress_options)
                                            : nullptr);
  }
  prune::ReportOptions report_options{
      models::example_input_shape(config),
      o.bucket_mb,
      o.first_bucket_mb,
      o.compress_options.count("enc") && o.compress_options.at("enc") != "auto"
          ? o.compress_options.at("enc")
          : "fp32",
      world,
      o.compress == "pactrain" ? comm::pactrain_levels(o.compress_options) : 1};

  RunPosition position;
  RunState loaded_run;
  if (!o.resume.empty()) {
    auto loaded = load_checkpoint(o.resume, config, *model, optimizer.get());
    PAC_CHECK(loaded.optimizer_name == o.optimizer,
              "{}: checkpoint was trained with --optimizer {}, this run uses {}", o.resume,
              loaded.optimizer_name, o.optimizer);
    PAC_CHECK(loaded.position.world_size == world,
              "{}: checkpoint was written by {} ranks, this run has {}; resuming with another "
              "world size would change the data order and the batch, so it is refused",
              o.resume, loaded.position.world_size, world);
    position = loaded.position;
    loaded_run = std::move(loaded.run);
  }
  position.world_size = world;
  // Masks loaded from a checkpoint must agree too, before the first compact all-reduce.
  // Built once: the per-step checks walk the same list every step.
  const optim::NamedParameters params = model->named_parameters();
  if (world > 1) prune::check_masks_agree(*group, params);
  // Under local SGD and DiLoCo each rank's optimizer has its own state, and the outer optimizer
  // its momentum: every checkpoint step is a synchronisation, after which these and the
  // parameters are all a resumed run needs.
  const std::string sync_name = !outer ? "step"
                                : sync_options.fragments > 0
                                    ? fmt::format("{}:{}:fragments={}", sync_options.kind,
                                                  sync_options.every, sync_options.fragments)
                                    : fmt::format("{}:{}", sync_options.kind, sync_options.every);
  if (!o.resume.empty()) {
    StateDict sync_state = restore_run_state(loaded_run, o.resume, *group, reducer.get(),
                                             o.compress, pruner.get(), sync_name);
    if (outer) {
      StateReader read(fmt::format("{}: rank {}'s --sync {} state", o.resume, rank, sync_name),
                       sync_state);
      optimizer->load_state(read.section("inner."));
      outer->load_state(read.section("outer."));
      read.finish();
    }
  }
  auto sync_state = [&] {
    StateDict state;
    if (outer) {
      add_prefixed(state, "inner.", optimizer->state());
      add_prefixed(state, "outer.", outer->state());
    }
    return state;
  };
  const bool checkpointing = o.checkpoint_every > 0 && !o.checkpoint.empty();
  // Every rank takes part (each contributes its compressor state); rank 0 writes the file while
  // the others wait for it, allowed the time a slow disk would take on top of --comm-timeout, and
  // every rank learns whether the write worked.
  auto write_checkpoint = [&] {
    RunState run =
        capture_run_state(*group, reducer.get(), o.compress, pruner.get(), sync_name, sync_state());
    if (group->size() == 1) {
      save_checkpoint(o.checkpoint, config, *model, optimizer.get(), position, o.optimizer, run,
                      o.recipe);
      return;
    }
    std::exception_ptr failure;
    if (leader) {
      try {
        if (fault.due("slow-checkpoint", position.step, rank))
          std::this_thread::sleep_for(std::chrono::seconds(3));
        save_checkpoint(o.checkpoint, config, *model, optimizer.get(), position, o.optimizer, run,
                      o.recipe);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    // A disk slower than 1 MB/s is taken for a hung one.
    StateDict rank_state = sync_state();
    if (reducer) add_prefixed(rank_state, "compressor.", reducer->compressor().state());
    const double allowance_s =
        checkpoint_bytes(*model, optimizer.get(), rank_state, group->size()) / 1e6;
    comm::TimeoutAllowance allowance(*group, allowance_s);
    const bool any_failed = comm::any_rank_failed(*group, failure != nullptr);
    if (failure) std::rethrow_exception(failure);
    PAC_CHECK(!any_failed,
              "rank {}: rank 0 could not write the checkpoint {} (its error is on its output)",
              rank, o.checkpoint);
  };
  MetricsWriter metrics(leader ? o.metrics : "", !o.resume.empty());
  // The first record: what ran, so that `pactrain train --config METRICS` runs it again.
  if (o.resume.empty() && !o.recipe.empty()) metrics.write({{"kind", "recipe"}, {"recipe", o.recipe}});
  const bool quiet = o.quiet || !leader;
  bool show_bar = !quiet && isatty(2);
  if (!quiet) {
    std::printf(
        "training %s (%ld parameters) on %s: %ld %s, %ld steps per epoch%s\n",
        model->describe().c_str(), static_cast<long>(model->num_parameters()),
        run_data.name().c_str(),
        static_cast<long>(run_data.is_text() ? run_data.text->train.numel()
                                             : run_data.train.size()),
        run_data.is_text() ? "training characters" : "samples", static_cast<long>(batches),
        o.resume.empty() ? "" : fmt::format(", resuming at step {}", position.step).c_str());
    if (reducer) {
      std::printf("data parallel: %d rank(s) over %s, compressor %s, %zu gradient buckets\n", world,
                  group->backend().c_str(), o.compress.c_str(), reducer->buckets().size());
    }
    if (gradient_has_momentum && o.momentum > 0.0f) {
      std::printf(
          "optimizer: sgd's momentum %g moves the weight decay only (the compressor's "
          "momentum correction moves the gradient)\n",
          static_cast<double>(o.momentum));
    }
    if (!adapted.empty()) {
      std::printf("compressor: pactrain with adamw: %s (AdamW's defaults; set them to override)\n",
                  adapted.c_str());
    }
    if (pruner) std::printf("pruning: %s\n", pruner->describe().c_str());
  }

  if (leader && !quiet && recalibration_loader) {
    std::printf("evaluation: batch-norm statistics re-estimated on %ld training batches first\n",
                static_cast<long>(recalibrate_batches));
  }
  auto recalibrate = [&] {
    if (!recalibration_loader) return 0;
    recalibration_loader->set_epoch(position.epoch);
    return nn::recalibrate_batch_norm(*model, recalibrate_batches, [&](int64_t b) {
      return recalibration_loader->batch(b).inputs.to(model_device);
    });
  };

  // Every rank evaluates a slice of the held-out data with rank 0's batch-norm statistics (the
  // only state that differs between replicas), so no rank idles long enough to look dead.
  const char* held_out = run_data.is_text() ? "validation" : "test";
  auto evaluate_now = [&] {
    MemoryTagScope tag(MemoryTag::evaluation);
    recalibrate();
    if (world > 1) {
      NoGradGuard no_grad;
      std::vector<comm::WorkPtr> pending;
      for (auto& [name, b] : model->named_buffers()) pending.push_back(group->broadcast(b, 0));
      for (auto& w : pending) w->wait();
    }
    return evaluate_run(*model, run_data, o, config, group.get());
  };

  TrainResult result;
  const double ring_factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  result.dense_bytes_per_step =
      static_cast<double>(prune::bytes_per_step(*model, report_options).dense) * ring_factor;
  auto run_start = Clock::now();
  auto evaluation_record = [&](const char* kind, int64_t epoch, const EvalResult& held) {
    nlohmann::json record{{"kind", kind},
                          {"epoch", epoch},
                          {"step", position.step},
                          {"test_loss", held.loss},
                          {"test_acc", held.accuracy},
                          {"wall_s", seconds_since(run_start)}};
    // A language model's loss in bits per token (per character for a character vocabulary).
    if (run_data.is_text()) record["bits_per_token"] = held.loss / std::numbers::ln2;
    return record;
  };
  model->train();
  for (int64_t epoch = position.epoch; epoch < o.epochs && position.step < total_steps; ++epoch) {
    loader->set_epoch(epoch);
    auto epoch_start = Clock::now();
    double loss_sum = 0.0, bytes_sum = 0.0, samples = 0.0;
    int64_t loss_count = 0;
    int64_t first_batch = epoch == position.epoch ? position.batch : 0;
    for (int64_t b = first_batch; b < batches && position.step < total_steps; ++b) {
      auto step_start = Clock::now();
      size_t allocations_before = cpu_allocator_stats().allocations;
      uint64_t passes_before = counted_passes();
      float lr = schedule->lr(position.step);
      optimizer->set_lr(lr);
      data::Batch batch;
      {
        MemoryTagScope tag(MemoryTag::data);
        batch = loader->batch(b);
        if (!device.is_cpu()) {
          batch.inputs = batch.inputs.to(model_device);
          batch.targets = batch.targets.to(model_device);
        }
      }
      // What synchronisations cost this step (the outer all-reduce, local SGD and DiLoCo only).
      comm::ReducerStepStats synced;
      double outer_s = 0.0;
      auto synchronise = [&](bool with_buffers) {
        auto outer_start = Clock::now();
        comm::ReducerStepStats stats = outer->synchronise(with_buffers);
        const double synchronised_s = seconds_since(outer_start);
        outer_s += synchronised_s;
        synced.bytes_sent += stats.bytes_sent;
        synced.codec_s += stats.codec_s;
        synced.exchanges += stats.exchanges;
        synced.exchanges_after_backward += stats.exchanges;  // none of it overlaps backward
        synced.comm_exposed_s += synchronised_s - stats.codec_s;
      };
      prune::PruneStep pruned;
      if (pruner) {
        // Masks come from the ranks' common weights: between synchronisations an event waits for
        // the next one, except when streaming, whose fragments never all agree before the end
        // of the epoch: there the event is a synchronisation of its own, as a checkpoint is.
        if (outer && !outer->in_agreement() && outer->streaming() &&
            pruner->event_due(position.step))
          synchronise(true);
        prune::ScoreContext context;
        context.input_shape = batch.inputs.shape();
        // The Pruner pauses the Reducer while the criterion scores: this gradient stays local.
        context.compute_gradients = [&] {
          optimizer->zero_grad();
          batch_loss((*model)(batch.inputs), batch.targets, o.label_smoothing).backward();
        };
        const bool event = pruner->event_due(position.step);
        if (event) release_cached_memory(device);
        pruned = pruner->step(position.step, context, !outer || outer->in_agreement());
        if (event) release_cached_memory(device);
        if (pruned.rewound) optimizer->reset_state();
        if (pruned.pruned && outer) outer->after_prune(pruned.rewound);
        if (pruned.pruned && !quiet && !show_bar) {
          std::printf("step %ld: pruned to %.1f%% sparsity%s\n", static_cast<long>(position.step),
                      100.0 * pruner->sparsity(), pruned.rewound ? ", weights rewound" : "");
        }
        // The last event (which may have waited for a synchronisation past its step).
        if (pruned.pruned && !quiet && position.step >= pruner->schedule().last_step()) {
          std::printf("%s", prune::prune_report(*model, report_options).c_str());
        }
      }
      if (fault.due("hang", position.step, rank))
        std::this_thread::sleep_for(std::chrono::hours(24));
      if (fault.due("exit", position.step, rank)) std::_Exit(9);
      if (fault.due("extra-collective", position.step, rank))
        group->all_reduce(Tensor::zeros({3}), comm::ReduceOp::sum)->wait();
      StepSettings settings{o.label_smoothing, o.clip_grad, nullptr,
                            fault.due("nan-loss", position.step, rank)};
      if (pruner) settings.after_reduce = [&] { pruner->observe(); };
      // A local step (local SGD, DiLoCo) reduces nothing: this rank checks its own gradients.
      const bool local = outer && outer->begin_step(position.step);
      StepOutcome outcome =
          train_step(*model, params, *optimizer, local ? nullptr : reducer.get(), batch, settings);
      const float value = outcome.loss;
      comm::ReducerStepStats comm_stats = outcome.comm;
      if (local && outer->turn_due(position.step + 1)) {
        // Streaming DiLoCo: a fragment's turn, its all-reduce left running behind the next steps;
        // what the turn waits for the one in flight is its exposed communication.
        auto turn_start = Clock::now();
        comm::ReducerStepStats turn = outer->after_local_step(position.step + 1);
        const double turn_s = seconds_since(turn_start);
        outer_s += turn_s;
        comm_stats.bytes_sent += turn.bytes_sent;
        comm_stats.comm_exposed_s += turn_s;
      }
      // The end of a period: the ranks agree again. The end of an epoch, a checkpoint step or the
      // run too, and there on the buffers as well, so that the model evaluated and saved is the
      // ranks' common one.
      const bool read_next = b + 1 == batches || position.step + 1 == total_steps ||
                             (checkpointing && (position.step + 1) % o.checkpoint_every == 0);
      if (outer && outer->pending() > 0 && (outer->due(position.step + 1) || read_next))
        synchronise(read_next);
      comm_stats.bytes_sent += synced.bytes_sent;
      comm_stats.codec_s += synced.codec_s;
      comm_stats.exchanges += synced.exchanges;
      comm_stats.exchanges_after_backward += synced.exchanges_after_backward;
      comm_stats.comm_exposed_s += synced.comm_exposed_s;
      const bool skip = outcome.skipped;
      if (reducer && pruned.pruned && !quiet && !show_bar) {
        std::string plan = reducer->compressor().describe_buckets();
        if (!plan.empty()) std::printf("  %s\n", plan.c_str());
      }
      if (skip) {
        // Every rank stops (or skips) at this step; the rank that found the fault names it.
        const std::string& nonfinite = outcome.nonfinite;
        std::string what =
            nonfinite == "loss" ? fmt::format("the loss is {} on rank {}", value, rank)
            : !nonfinite.empty()
                ? fmt::format("the gradient of '{}' is not finite on rank {}", nonfinite, rank)
                : fmt::format("the gradient of rank {} is not finite", comm_stats.nonfinite_rank);
        PAC_CHECK(o.skip_nonfinite,
                  "step {}: {}; the run stops (--skip-nonfinite would skip the step)",
                  position.step + 1, what);
        ++result.skipped_steps;
        if (!quiet) {
          std::fprintf(stderr, "step %ld: %s; step skipped\n", static_cast<long>(position.step + 1),
                       what.c_str());
        }
      }
      ++position.step;
      position.epoch = b + 1 == batches ? epoch + 1 : epoch;
      position.batch = b + 1 == batches ? 0 : b + 1;

      if (!skip) {
        loss_sum += value;
        ++loss_count;
      }
      bytes_sum += static_cast<double>(comm_stats.bytes_sent);
      samples += static_cast<double>(batch.targets.numel() * world);
      double step_s = seconds_since(step_start);
      double samples_per_s = batch.targets.numel() / std::max(step_s, 1e-9);
      if (position.step % o.log_every == 0 || b + 1 == batches || position.step == total_steps ||
          outer_s > 0.0) {
        metrics.write(
            {{"kind", "step"},
             {"step", position.step},
             {"epoch", epoch},
             {"loss", value},
             {"lr", lr},
             {"samples_per_s", samples_per_s * world},
             {"step_s", step_s},
             {"bytes_sent", comm_stats.bytes_sent},
             {"compute_s", std::max(0.0, step_s - comm_stats.comm_exposed_s - comm_stats.codec_s)},
             {"codec_s", comm_stats.codec_s},
             {"comm_exposed_s", comm_stats.comm_exposed_s},
             {"outer_s", outer_s},
             {"exchanges", comm_stats.exchanges},
             {"exchanges_after_backward", comm_stats.exchanges_after_backward},
             {"codec_kernels", comm_stats.codec_kernels},
             {"gradient_passes", counted_passes() - passes_before},
             {"allocations", cpu_allocator_stats().allocations - allocations_before},
             {"gpu_bytes", device.is_cpu() ? 0 : cuda_allocator_stats().current_bytes},
             {"gpu_peak_bytes", device.is_cpu() ? 0 : cuda_allocator_stats().peak_bytes},
             {"density", pruner ? 1.0 - pruner->sparsity() : 1.0},
             {"world_size", world}});
      }
      if (show_bar) {
        double per_step = seconds_since(epoch_start) / (b + 1 - first_batch);
        draw_progress(epoch, o.epochs, b + 1, batches, value, samples_per_s * world,
                      per_step * (total_steps - position.step));
      }
      // --eval-every, unless the epoch's own evaluation follows at once.
      if (o.eval_every > 0 && position.step % o.eval_every == 0 && b + 1 < batches &&
          position.step < total_steps) {
        EvalResult held = evaluate_now();
        metrics.write(evaluation_record("eval", epoch, held));
        if (!quiet) {
          if (show_bar) std::fprintf(stderr, "\n");
          std::printf("step %ld: %s loss %.4f (%.3f bits per token), accuracy %.2f%%\n",
                      static_cast<long>(position.step), held_out, held.loss,
                      held.loss / std::numbers::ln2, 100.0 * held.accuracy);
          std::fflush(stdout);
        }
      }
      if (checkpointing && position.step % o.checkpoint_every == 0) {
        if (fault.due("kill-in-checkpoint", position.step, rank)) arm_checkpoint_kill();
        write_checkpoint();
      }
      // What this step left in the caches and the next one will not take (a mask change's old
      // buffers, say) goes back to the system.
      cpu_release_idle_blocks();
      if (!device.is_cpu()) cuda_release_idle_blocks();
    }
    if (show_bar) std::fprintf(stderr, "\n");
    result.train_loss = loss_count ? loss_sum / loss_count : 0.0;
    result.bytes_per_step = loss_count ? bytes_sum / loss_count : 0.0;
    result.samples_per_s = samples / std::max(seconds_since(epoch_start), 1e-9);
    result.test = evaluate_now();
    if (!leader) continue;
    nlohmann::json record = evaluation_record("epoch", epoch, result.test);
    record["train_loss"] = result.train_loss;
    // Over every step of the epoch: the step records are a sample (--log-every), which with
    // --sync would over-count the steps that synchronise.
    record["bytes_per_step"] = result.bytes_per_step;
    metrics.write(record);
    if (!quiet) {
      std::printf("epoch %ld: train loss %.4f, %s loss %.4f, %s accuracy %.2f%% (%.0f s)\n",
                  static_cast<long>(epoch + 1), result.train_loss, held_out, result.test.loss,
                  held_out, 100.0 * result.test.accuracy, seconds_since(epoch_start));
      std::fflush(stdout);
    }
  }
  if (!o.checkpoint.empty()) write_checkpoint();
  // Where the bytes went: always in the metrics, printed with --memory-report.
  metrics.write(memory_record(device));
  if (o.memory_report && leader) std::printf("\n%s", memory_report_text(device).c_str());
  result.steps = position.step;
  result.density = pruner ? 1.0 - pruner->sparsity() : 1.0;
  if (leader && !quiet) {
    std::printf("\n%-16s %-12s %-10s %-10s %-22s %s\n", "compressor", "test acc", "samples/s",
                "density", "bytes/step (per rank)", "dense would send");
    std::printf("%-16s %-12s %-10.0f %-10s %-22.0f %.0f (%.3fx)\n", o.compress.c_str(),
                fmt::format("{:.2f}%", 100.0 * result.test.accuracy).c_str(), result.samples_per_s,
                fmt::format("{:.1f}%", 100.0 * result.density).c_str(), result.bytes_per_step,
                result.dense_bytes_per_step,
                result.dense_bytes_per_step > 0
                    ? result.bytes_per_step / result.dense_bytes_per_step
                    : 0.0);
  }
  return result;
}

}  // namespace

}  // namespace pac
